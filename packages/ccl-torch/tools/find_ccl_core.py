"""Print ccl-core's include dir and library dir (installed Python package), for building ccl-torch alone."""
import ccl_core

print(ccl_core.get_include())
print(ccl_core.get_library_dir())
