// How many threads a rank computes with, as its framework knows it (ccl-torch passes torch.get_num_threads()): the
// shared-memory path spreads large messages over as many, within the rank's share of the host's cores. Without a
// hint, OMP_NUM_THREADS stands for it; CCL_CORE_THREADS overrides both. Read when a process's first group on one host
// is created.
#pragma once

namespace ccl_core {

void set_compute_threads(int threads);

}  // namespace ccl_core
