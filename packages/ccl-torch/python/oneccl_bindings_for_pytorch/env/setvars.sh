# Kept for scripts and docs written for the original bindings, which had to source this file.
# Nothing needs sourcing with ccl-torch: oneCCL is found without environment variables, and importing
# oneccl_bindings_for_pytorch sets CCL_ROOT, CPATH and LIBRARY_PATH for run-time builds (DeepSpeed) by itself.
# Sourcing it exports what the original's did, pointing at the pip/conda oneCCL and Intel MPI of this environment:
# CCL_ROOT, I_MPI_ROOT, FI_PROVIDER_PATH, PATH, CPATH, LIBRARY_PATH and LD_LIBRARY_PATH.
# The environment's prefix comes from this file's place (<prefix>/lib/pythonX.Y/site-packages/
# oneccl_bindings_for_pytorch/env), not from whichever python3 comes first on PATH.
_ccl_torch_prefix="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/../../../../.." 2>/dev/null && pwd)"
_ccl_torch_prepend() {  # name dir: put dir first in the path list $name, once
    case ":$(eval echo "\${$1:-}"):" in
        *":$2:"*) ;;
        *) eval "export $1=\"$2\${$1:+:\${$1}}\"" ;;
    esac
}
if [ -n "${_ccl_torch_prefix}" ] && [ -f "${_ccl_torch_prefix}/lib/libccl.so.1" ]; then
    export CCL_ROOT="${_ccl_torch_prefix}"
    _ccl_torch_prepend CPATH "${_ccl_torch_prefix}/include"
    _ccl_torch_prepend LIBRARY_PATH "${_ccl_torch_prefix}/lib"
    _ccl_torch_prepend LD_LIBRARY_PATH "${_ccl_torch_prefix}/lib"
    _ccl_torch_prepend PATH "${_ccl_torch_prefix}/bin"
    if [ -f "${_ccl_torch_prefix}/lib/libmpi.so.12" ]; then  # impi-rt: mpiexec and libfabric
        export I_MPI_ROOT="${_ccl_torch_prefix}"
        export FI_PROVIDER_PATH="${_ccl_torch_prefix}/lib"
    fi
fi
unset _ccl_torch_prefix
unset -f _ccl_torch_prepend
