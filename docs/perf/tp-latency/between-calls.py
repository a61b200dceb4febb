import time, torch, torch.distributed as dist, oneccl_bindings_for_pytorch
dist.init_process_group("ccl"); r = dist.get_rank()
name = dist.group.WORLD.group_name; op = torch.ops.ccl.all_reduce_.default
t = torch.ones(512, dtype=torch.bfloat16)
big = torch.ones(8 << 20)  # 32 MiB
w = torch.randn(256, 256)
def run(label, between, it=300):
    durs = []
    for i in range(it):
        between()
        s = time.perf_counter(); op(t, name, "sum"); e = time.perf_counter()
        durs.append((s, e))
    ends = torch.tensor([d[1] for d in durs], dtype=torch.float64); starts = torch.tensor([d[0] for d in durs], dtype=torch.float64)
    all_s = [torch.zeros_like(starts) for _ in range(2)]; all_e = [torch.zeros_like(ends) for _ in range(2)]
    dist.all_gather(all_s, starts); dist.all_gather(all_e, ends)
    last_entry = torch.maximum(*all_s); last_ret = torch.maximum(*all_e)
    d = ((last_ret - last_entry) * 1e6).sort().values
    skew = ((last_entry - torch.minimum(*all_s)) * 1e6).sort().values
    if r == 0: print(f"{label:30s} median {d[len(d)//2]:.1f} us  p90 {d[int(len(d)*.9)]:.1f}   skew median {skew[len(skew)//2]:.1f} p90 {skew[int(len(skew)*.9)]:.1f}")
run("nothing between", lambda: None)
run("32 MiB streamed between", lambda: big.mul_(1))
run("256^2 matmul between", lambda: w @ w)
run("sleep 0.5 ms between", lambda: time.sleep(0.0005))
run("spin 0.5 ms between", lambda: [None for _ in iter(lambda: time.perf_counter() - time.perf_counter() > 1, True)] if False else (lambda t0=time.perf_counter(): [0 for _ in iter(lambda: time.perf_counter() - t0 < 0.0005, False)])())
run("nothing between", lambda: None)
dist.destroy_process_group()
