// libfabric's shared-memory provider keeps a 64 MiB region per process in /dev/shm, named "<pid>:<n>:<n>", and
// removes it at a normal exit or SIGTERM, but not when the process is killed (SIGKILL, abort). Once a
// communicator aborts because a peer is gone, the survivors remove the regions of their same-host peers whose
// process no longer exists, so that dead ranks do not leave RAM-backed files behind.
#pragma once

#include <sys/types.h>

#include <vector>

namespace ccl_core::detail {

// True when `pid` no longer exists or is a zombie (waits also use it to notice a same-host peer's death).
bool process_is_gone(pid_t pid);

// Removes /dev/shm/<pid>:* for every pid in `peers` that no longer exists (or is a zombie). Never throws.
void remove_shm_of_dead_processes(const std::vector<pid_t>& peers);

// A communicator that is never destroyed (aborted ones on purpose, others kept alive by objects that outlive
// the interpreter, such as FSDP's device mesh) never has libfabric remove this process's region: do it at
// exit. Registered once when oneCCL is initialised; unlinking a name never disturbs a peer's mapping.
void remove_own_shm_at_exit();

}  // namespace ccl_core::detail
