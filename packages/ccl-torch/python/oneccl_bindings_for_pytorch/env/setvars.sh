# Kept for scripts written for the original bindings, which had to source this file.
# Nothing needs sourcing with ccl-torch: oneCCL is found and configured without environment variables.
# Sourcing it is harmless; it only exports what a shell would want for mpiexec from the impi-rt package.
_ccl_torch_prefix="$(python3 -c 'import sys; print(sys.prefix)' 2>/dev/null)"
if [ -n "${_ccl_torch_prefix}" ] && [ -d "${_ccl_torch_prefix}/bin" ]; then
    case ":${PATH}:" in
        *":${_ccl_torch_prefix}/bin:"*) ;;
        *) export PATH="${_ccl_torch_prefix}/bin:${PATH}" ;;
    esac
fi
unset _ccl_torch_prefix
