"""A job in which a rank does not come to a collective (tests/torch/test_hang_explanation.py).

    python hang_job.py RANK PORT MODE

Three ranks run all_reduce and broadcast. Then ranks 0 and 1 all_reduce while rank 2 is elsewhere:
- MODE timeout: rank 2 sleeps past the group's timeout (TIMEOUT s): the others' all_reduce fails, and its error must
  say where rank 2 is. Each rank prints its error and how long the all_reduce took.
- MODE signal: rank 2 sleeps a while, then joins: the all_reduce completes. Meanwhile the test sends SIGUSR1 to the
  ranks, each of which must print where every rank is and go on.
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

TIMEOUT = 6.0


def main(rank, port, mode):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("ccl", rank=rank, world_size=3, timeout=datetime.timedelta(seconds=TIMEOUT))
    dist.all_reduce(torch.ones(4))
    dist.broadcast(torch.ones(8, dtype=torch.bfloat16), src=0)
    print(f"rank {rank} ready", flush=True)
    if rank == 2:
        time.sleep(TIMEOUT + 2 if mode == "timeout" else 5)
        if mode == "timeout":
            dist.destroy_process_group()
            return
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(1024))
        print(f"rank {rank} all_reduce done after {time.monotonic() - start:.2f} s", flush=True)
    except Exception as e:  # noqa: BLE001 - the test reads the message
        print(f"rank {rank} failed after {time.monotonic() - start:.2f} s: {e}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
