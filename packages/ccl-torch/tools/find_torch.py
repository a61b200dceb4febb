"""Print what meson needs of the installed torch, one item per line:
include dirs (';'-separated), library dir, _GLIBCXX_USE_CXX11_ABI, torch version.
Run with TORCH_DEVICE_BACKEND_AUTOLOAD=0 so that importing torch does not import installed plugins (us)."""
import os

os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

import torch  # noqa: E402
from torch.utils import cpp_extension  # noqa: E402

print(";".join(cpp_extension.include_paths()))
print(cpp_extension.library_paths()[0])
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(torch.__version__)
