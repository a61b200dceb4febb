# Kept for scripts written for the original bindings, which had to source this file.
# Nothing needs sourcing with ccl-torch: oneCCL is found and configured without environment variables.
# Sourcing it is harmless; it only exports what a shell would want for mpiexec from the impi-rt package.
# The environment's prefix from this file's place (<prefix>/lib/pythonX.Y/site-packages/oneccl_bindings_for_pytorch/env),
# not from whichever python3 comes first on PATH.
_ccl_torch_prefix="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/../../../../.." 2>/dev/null && pwd)"
if [ -n "${_ccl_torch_prefix}" ] && [ -d "${_ccl_torch_prefix}/bin" ]; then
    case ":${PATH}:" in
        *":${_ccl_torch_prefix}/bin:"*) ;;
        *) export PATH="${_ccl_torch_prefix}/bin:${PATH}" ;;
    esac
fi
unset _ccl_torch_prefix
