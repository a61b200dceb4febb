# Same as setvars.sh (the original shipped both names).
. "$(dirname "${BASH_SOURCE[0]:-$0}")/setvars.sh"
