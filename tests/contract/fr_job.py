"""A job in which rank 1 skips a collective, with torch's flight recorder on (as tests/contract/test_flight_recorder.py
runs it on ccl and gloo).

    python fr_job.py BACKEND RANK PORT DUMP_DIR

Both ranks run all_reduce and broadcast; then rank 0 runs all_reduce while rank 1 skips it, waits out the group's
timeout, and runs barrier. Rank 0's all_reduce times out; then rank 1's barrier does. On ccl each failure runs the
group's abort hooks, with which torch's flight recorder writes DUMP_DIR/fr_rank_<rank>; gloo has no abort hooks, so
there the job dumps by hand after the failure.
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

TIMEOUT = 3.0


def main(backend, rank, port, dump_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      TORCH_FR_DUMP_TEMP_FILE=os.path.join(dump_dir, "fr_rank_"))
    dist.init_process_group(backend, rank=rank, world_size=2, timeout=datetime.timedelta(seconds=TIMEOUT))
    dist.all_reduce(torch.ones(4))
    dist.broadcast(torch.ones(4), src=0)
    try:
        if rank == 0:
            dist.all_reduce(torch.ones(16))
        else:
            time.sleep(TIMEOUT + 1)
        dist.barrier()
    except Exception as e:  # noqa: BLE001 - expected: the collective that rank 1 skipped fails
        print(f"rank {rank}: {type(e).__name__}: {str(e).splitlines()[0]}", flush=True)
    if backend == "gloo":
        torch._C._distributed_c10d._dump_fr_trace_file(rank, backend="gloo")
        os._exit(0)  # a failed gloo group can abort the process as the interpreter shuts down
    dist.destroy_process_group()  # the aborted group goes without a barrier; oneCCL's files in /dev/shm go at exit


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
