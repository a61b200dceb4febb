"""The original bindings' old name: `import torch_ccl` is `import oneccl_bindings_for_pytorch`."""
import sys as _sys

import oneccl_bindings_for_pytorch as _impl
from oneccl_bindings_for_pytorch import *  # noqa: F401,F403
from oneccl_bindings_for_pytorch import __version__, cwd  # noqa: F401

_sys.modules[__name__].__dict__.update({k: getattr(_impl, k) for k in _impl.__all__})
