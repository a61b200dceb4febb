"""python -m oneccl_bindings_for_pytorch.doctor: ccl-doctor under the original package's name (see ccl_doctor)."""
import sys

from ccl_doctor.cli import main

if __name__ == "__main__":
    sys.exit(main())
