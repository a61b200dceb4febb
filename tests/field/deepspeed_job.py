"""DeepSpeed on CPU as a user runs it, started by torchrun: ZeRO stages 0-3 training, then tensor-parallel
inference (deepspeed.init_inference, whose row-parallel layers call inference_all_reduce).

    torchrun --nproc-per-node 2 deepspeed_job.py --backend ccl --out result.json

--backend gloo hides oneccl_bindings_for_pytorch, as a machine without it: DeepSpeed's CPU accelerator then picks
gloo by itself. Nothing is sourced and no variable is set for ccl: DeepSpeed finds oneCCL by itself.
Each rank writes its losses, outputs, backend and peak RSS to <out>.<rank>.
"""
import argparse
import json
import os
import resource
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--backend", choices=["ccl", "gloo"], required=True)
parser.add_argument("--stages", default="0,1,2,3,3-fetch-by-all-reduce")
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--inference", action="store_true", help="also tensor-parallel inference, fp32 and bf16 (needs transformers)")
parser.add_argument("--out", required=True)
args = parser.parse_args()

if args.backend == "gloo":
    sys.modules["oneccl_bindings_for_pytorch"] = None  # import fails: DeepSpeed's CPU accelerator falls back to gloo
os.environ.setdefault("DS_ACCELERATOR", "cpu")

import deepspeed  # noqa: E402

if args.backend == "gloo":
    # On gloo DeepSpeed's inference_all_reduce takes its own shared-memory op, which dies of SIGSEGV here
    # (deepspeed 0.19.8); the reference run uses torch's all_reduce on gloo instead.
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402


class Block(nn.Module):
    """A transformer-style MLP block: `up_proj` is split by columns, `down_proj` by rows (LLaMA's names) (its output is all-reduced)."""

    def __init__(self, width=64, hidden=256):
        super().__init__()
        self.up_proj = nn.Linear(width, hidden)
        self.down_proj = nn.Linear(hidden, width)

    def forward(self, x):
        return x + self.down_proj(torch.relu(self.up_proj(x)))


def model():
    torch.manual_seed(0)
    return nn.Sequential(Block(), Block(), nn.Linear(64, 1))


def train(stage, rank):
    config = {
        "train_micro_batch_size_per_gpu": 8,
        "gradient_accumulation_steps": 1,
        # DeepSpeed's defaults otherwise (the config that hung before); ZeRO-3 can also fetch parameters by all-reduce
        "zero_optimization": {"stage": int(stage[0]),
                              "stage3_use_all_reduce_for_fetch_params": stage == "3-fetch-by-all-reduce"},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
    }
    net = model()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    engine, *_ = deepspeed.initialize(model=net, optimizer=optimizer, config=config)
    data = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(args.steps):
        x = torch.randn(8, 64, generator=data)
        loss = nn.functional.mse_loss(engine(x), x.sum(dim=1, keepdim=True).tanh())
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    engine.destroy()
    return losses


def tensor_parallel_inference(dtype):
    engine = deepspeed.init_inference(model().to(dtype), tensor_parallel={"tp_size": dist.get_world_size()},
                                      dtype=dtype, injection_policy={Block: ("down_proj",)})
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(7)).to(dtype)
    with torch.no_grad():
        out = engine(x)
        reference = model().to(dtype)(x)  # the whole model on one rank
    return out.float().flatten().tolist(), reference.float().flatten().tolist()


deepspeed.init_distributed()
rank = dist.get_rank()
result = {"backend": dist.get_backend(), "stages": {}}
# ZeRO-3 fetches parameters with async all_reduce and waits on what it returns (DeepSpeed's CCLBackend returned None)
fetched = torch.full((8,), float(rank + 1))
deepspeed.comm.all_reduce(fetched, async_op=True).wait()
result["async all_reduce"] = fetched.tolist()
result["deepspeed backend"] = type(deepspeed.comm.comm.cdb).__name__
for stage in [s for s in args.stages.split(",") if s]:
    result["stages"][stage] = train(stage, rank)
if args.inference:
    for dtype in (torch.float32, torch.bfloat16):
        result[f"inference {dtype}"], result[f"reference {dtype}"] = tensor_parallel_inference(dtype)
result["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
with open(f"{args.out}.{rank}", "w") as f:
    json.dump(result, f)
dist.barrier()
