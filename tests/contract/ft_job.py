"""Fault-tolerant training, as tests/contract/test_fault_tolerance.py runs it on ccl and on gloo.

    python ft_job.py BACKEND MODE MEMBER PORT OUT

Three members train a small model (every step: gradients summed over the group, divided by its size, an SGD step).
Member 2 kills itself (SIGKILL) at step KILL_AT. The survivors see their all_reduce fail, keep the weights of the last
step every one of them completed, and go on as a group of two:
- MODE reconfigure: the group is made with enable_reconfigure=True and rebuilt in place (torch's _reconfigure) with
  the survivors' handles; after step REJOIN_AT - 1 a replacement (MEMBER 3, started by the test at once, waiting
  for its turn) joins, receives the weights from rank 0, and the three finish the job.
- MODE shrink: the survivors call torch's shrink_group and finish the job as two (no replacement).
Weights stay on a grid of 2^-16 (rounded after each step) and data are small integers, so every sum is exact and the
result does not depend on the order in which a backend adds: ccl's and gloo's survivors must reach the same bits.
Each process writes OUT/<member>.json: its steps (step, world size), its timeline and the final weights.
"""
import datetime
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

KILL_AT, REJOIN_AT, STEPS = 4, 8, 10
GRID = 2.0 ** 16


def main(backend, mode, member, port, out):
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=60))
    timeout = datetime.timedelta(seconds=30)
    log = {"steps": [], "timeline": {}}

    def now(name):
        log["timeline"][name] = time.time()

    replacement = member == 3
    if mode == "reconfigure":
        dist.init_process_group(backend, store=store, rank=0 if replacement else member,
                                world_size=1 if replacement else 3, enable_reconfigure=True, timeout=timeout)
    else:
        dist.init_process_group(backend, store=store, rank=member, world_size=3, timeout=timeout)

    def reconfigure(uuid, members):
        store.set(f"handle/{uuid}/{member}", dist.distributed_c10d._get_reconfigure_handle())
        handles = [store.get(f"handle/{uuid}/{m}").decode() for m in members]
        dist.distributed_c10d._reconfigure(uuid=uuid, handles=handles).wait()

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2, dtype=torch.float64)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.round(p * GRID) / GRID)

    def train_step(step, data_id):
        g = torch.Generator().manual_seed(data_id * 100 + step)
        x = torch.randint(-3, 4, (8, 4), generator=g).double()
        y = torch.randint(-3, 4, (8, 2), generator=g).double()
        model.zero_grad()
        ((model(x) - y) ** 2).sum().backward()
        grads = [p.grad for p in model.parameters()]
        for grad in grads:
            dist.all_reduce(grad)  # raises when a member is gone
        size = dist.get_world_size()
        with torch.no_grad():
            for p, grad in zip(model.parameters(), grads):
                p.sub_(grad / size * 2.0 ** -8)
                p.copy_(torch.round(p * GRID) / GRID)
        log["steps"].append((step, size))

    step = 0
    if replacement:  # joins when the survivors ask, and starts from their weights
        store.wait(["rejoin"], datetime.timedelta(seconds=120))
        reconfigure(3, [0, 1, 3])
        with torch.no_grad():
            for p in model.parameters():
                dist.broadcast(p, src=0)
        step = REJOIN_AT
    elif mode == "reconfigure":
        reconfigure(1, [0, 1, 2])
    while step < STEPS:
        if step == REJOIN_AT and not replacement:
            log["weights before rejoin"] = [v for p in model.parameters() for v in p.detach().flatten().tolist()]
            if mode != "reconfigure":
                break  # shrink: the two finish the job
            store.set("rejoin", "1")
            reconfigure(3, [0, 1, 3])
            with torch.no_grad():
                for p in model.parameters():
                    dist.broadcast(p, src=0)
        if member == 2 and step == KILL_AT:
            store.set("died", str(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        saved = [p.detach().clone() for p in model.parameters()]
        try:
            train_step(step, 2 if replacement else member)
        except Exception as e:  # noqa: BLE001 - a member is gone: go on without it
            now("error")
            log["error"] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
            with torch.no_grad():  # the weights of the last step every survivor completed
                for p, s in zip(model.parameters(), saved):
                    p.copy_(s)
            if mode == "reconfigure":
                reconfigure(2, [0, 1])
            else:
                dist.shrink_group([2])
            now("rebuilt")
            train_step(step, member)  # the step that failed, again, by the survivors
            now("resumed")
        step += 1
    log["weights"] = [v for p in model.parameters() for v in p.detach().flatten().tolist()]
    log["died"] = float(store.get("died").decode()) if store.check(["died"]) else None
    with open(os.path.join(out, f"{member}.json"), "w") as f:
        json.dump(log, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
