"""What one small torch.ops.ccl.all_reduce_ costs after the work a decode does between calls.

    torchrun --nproc-per-node 2 docs/perf/tp-latency/between-calls.py

Each case runs 300 calls of a 1 KiB bf16 all_reduce with something in between; a call's time runs from the last
rank's entry to the last rank's return (ranks of one host share CLOCK_MONOTONIC), so waiting for a slower peer does not
count; skew is how far apart the ranks entered.
"""
import time

import torch
import torch.distributed as dist

import oneccl_bindings_for_pytorch  # noqa: F401  (registers torch.ops.ccl)


def spin(seconds):
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        pass


def main():
    dist.init_process_group("ccl")
    size = dist.get_world_size()
    name = dist.group.WORLD.group_name
    all_reduce_ = torch.ops.ccl.all_reduce_.default
    t = torch.ones(512, dtype=torch.bfloat16)
    big = torch.ones(8 << 20)  # 32 MiB
    w = torch.randn(256, 256)

    def case(label, between, calls=300):
        spans = torch.empty(calls, 2, dtype=torch.float64)
        for i in range(calls):
            between()
            start = time.perf_counter()
            all_reduce_(t, name, "sum")
            spans[i, 0], spans[i, 1] = start, time.perf_counter()
        every = [torch.empty_like(spans) for _ in range(size)]
        dist.all_gather(every, spans)
        every = torch.stack(every)
        last_entry, last_return = every[:, :, 0].max(0).values, every[:, :, 1].max(0).values
        call = ((last_return - last_entry) * 1e6).sort().values
        skew = ((last_entry - every[:, :, 0].min(0).values) * 1e6).sort().values
        if dist.get_rank() == 0:
            print(f"{label:28s} median {call[calls // 2]:6.1f} us  p90 {call[int(calls * 0.9)]:6.1f}"
                  f"   skew median {skew[calls // 2]:6.1f} p90 {skew[int(calls * 0.9)]:6.1f}")

    case("nothing between", lambda: None)
    case("32 MiB streamed between", lambda: big.mul_(1))
    case("256^2 matmul between", lambda: w @ w)
    case("0.5 ms sleep between", lambda: time.sleep(0.0005))
    case("0.5 ms spin between", lambda: spin(0.0005))
    case("nothing between", lambda: None)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
