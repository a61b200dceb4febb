"""ccl-bench --tp-decode: greedy decoding of a Llama-shaped stack split by tensor parallelism, per path.

The model has random weights (nothing is downloaded): an embedding, `layers` blocks of RMSNorm, attention with a KV
cache (q, k, v column-parallel, o row-parallel) and a SwiGLU MLP (gate and up column-parallel, down row-parallel),
then a vocabulary-parallel head. torch's parallelize_module splits it on a CPU DeviceMesh, as torch's tensor-parallel
tutorial does, so every row-parallel layer all-reduces an activation of batch x hidden per token (2 per layer) and the
head all-gathers the logits. The paths:
- dtensor-ccl, dtensor-gloo: the model as parallelize_module leaves it (DTensor parameters; DTensor's functional
  collectives on a group of that backend). In eager mode DTensor's own dispatch costs far more than the collectives.
- ccl, gloo, ccl-op, deepspeed-inference: the same split taken out of DTensor (each rank's shards as plain tensors,
  as inference engines run), the partial sums all-reduced and the logits gathered explicitly: by
  torch.distributed on a group of that backend, by the registered ops torch.ops.ccl.all_reduce_ and
  all_gather_into_tensor_ (ccl-op), or by DeepSpeed's inference_all_reduce (its own oneCCL op; the logits then by
  torch.distributed on ccl).
- fake: the plain split with no communication at all: the compute alone.
A plain path's communication time per token sums, over its collective calls, the time from the last rank's entry to the
last rank's return (ranks of one host share CLOCK_MONOTONIC): a rank that arrives first also waits for its peers'
computation, which no backend can shorten. A dtensor path's is its time per token less fake's. Every path runs once per round, interleaved with the others.
Every path must produce the same tokens as the first (fake aside), or first differ from them at a near tie: where
the two paths' logits differ by rounding only (tiny against their spread) and that rounding is as large as the gap
between the two tokens. Backends that sum the ranks' partials in another order or precision (gloo's ring in bf16,
from 4 ranks on) round differently, and a greedy decode follows its first flip; anything else fails the run.
CCL_BENCH_FAULT set makes the last path's all-reduce leave the second half of each sum unreduced on every rank, to
prove that a wrong result fails it.
"""
from __future__ import annotations

import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PATHS = ("ccl", "ccl-op", "gloo", "deepspeed-inference", "dtensor-ccl", "dtensor-gloo")


class RMSNorm(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * self.weight


class Attention(nn.Module):
    def __init__(self, hidden: int, head_dim: int):
        super().__init__()
        self.head_dim = head_dim
        self.q, self.k, self.v = (nn.Linear(hidden, hidden, bias=False) for _ in range(3))
        self.o = nn.Linear(hidden, hidden, bias=False)
        self.reduce = None  # set for the paths that sum the row-parallel partials themselves
        self.cache: tuple[torch.Tensor, torch.Tensor] | None = None

    def forward(self, x):
        b, s, _ = x.shape
        # after the column-parallel split each rank holds its heads only: count them from the width it got
        q, k, v = (proj(x).view(b, s, -1, self.head_dim).transpose(1, 2) for proj in (self.q, self.k, self.v))
        if self.cache is not None:
            k, v = torch.cat([self.cache[0], k], 2), torch.cat([self.cache[1], v], 2)
        self.cache = (k, v)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=s > 1)
        out = self.o(y.transpose(1, 2).reshape(b, s, -1))
        return self.reduce(out) if self.reduce else out


class MLP(nn.Module):
    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.gate, self.up = nn.Linear(hidden, ffn, bias=False), nn.Linear(hidden, ffn, bias=False)
        self.down = nn.Linear(ffn, hidden, bias=False)
        self.reduce = None

    def forward(self, x):
        out = self.down(F.silu(self.gate(x)) * self.up(x))
        return self.reduce(out) if self.reduce else out


class Block(nn.Module):
    def __init__(self, hidden: int, ffn: int, head_dim: int):
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(hidden), RMSNorm(hidden)
        self.attn, self.mlp = Attention(hidden, head_dim), MLP(hidden, ffn)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Model(nn.Module):
    def __init__(self, vocab: int, hidden: int, layers: int, ffn: int, head_dim: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(Block(hidden, ffn, head_dim) for _ in range(layers))
        self.norm = RMSNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)
        self.gather = None  # set for the paths that gather the vocabulary-parallel logits themselves

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x[:, -1:]))
        return self.gather(logits) if self.gather else logits

    def reset_cache(self):
        for block in self.blocks:
            block.attn.cache = None


def build(args, dtype, mesh, path: str, group, ds_op=None, faulty: bool = False) -> Model:
    """The model with seed-0 weights, split over `mesh` by parallelize_module; for every path but the dtensor ones,
    then taken out of DTensor with the path's collectives put in."""
    from torch.distributed.tensor import DTensor, Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    torch.manual_seed(0)
    model = Model(args.vocab, args.hidden, args.layers, args.ffn, args.head_dim)
    for p in model.parameters():  # small weights: activations stay in range over many layers, in bf16 too
        if p.dim() > 1:
            nn.init.normal_(p, std=1 / math.sqrt(p.shape[-1]))
    model = model.to(dtype)
    plan = {"head": ColwiseParallel(output_layouts=Replicate())}
    for i in range(args.layers):
        plan.update({f"blocks.{i}.attn.q": ColwiseParallel(), f"blocks.{i}.attn.k": ColwiseParallel(),
                     f"blocks.{i}.attn.v": ColwiseParallel(), f"blocks.{i}.attn.o": RowwiseParallel(),
                     f"blocks.{i}.mlp.gate": ColwiseParallel(), f"blocks.{i}.mlp.up": ColwiseParallel(),
                     f"blocks.{i}.mlp.down": RowwiseParallel()})
    parallelize_module(model, mesh, plan)
    if path.startswith("dtensor-"):
        return model
    for module in model.modules():  # each rank's shards as plain tensors, without DTensor's hooks
        module._forward_pre_hooks.clear()
        module._forward_hooks.clear()
        for name, p in list(module.named_parameters(recurse=False)):
            if isinstance(p, DTensor):
                setattr(module, name, nn.Parameter(p.to_local(), requires_grad=False))
    reduce, gather = _collectives(path, group, ds_op, faulty)
    for block in model.blocks:
        block.attn.reduce = block.mlp.reduce = reduce
    model.gather = gather
    return model


def _collectives(path: str, group, ds_op, faulty: bool = False):
    """(reduce, gather) for a plain path: the sum of the row-parallel partials, in place; the vocabulary-parallel
    logits [b, 1, vocab / tp] of every rank side by side, [b, 1, vocab]."""
    import torch.distributed as dist

    size = group.size()
    name = group.group_name
    if path == "fake":
        return (lambda t: t), (lambda local: local.repeat(1, 1, size))
    if path == "ccl-op":
        all_reduce_, all_gather_ = torch.ops.ccl.all_reduce_.default, torch.ops.ccl.all_gather_into_tensor_.default
        reduce_in_place = lambda t: all_reduce_(t, name, "sum")  # noqa: E731
        gather_into = lambda out, t: all_gather_(out, t, name)  # noqa: E731
    else:
        gather_into = lambda out, t: dist.all_gather_into_tensor(out, t, group=group)  # noqa: E731
        if path == "deepspeed-inference":
            from deepspeed.comm.reduce_op import ReduceOp

            reduce_in_place = lambda t: ds_op.inference_all_reduce(t, ReduceOp.SUM)  # noqa: E731
        else:
            reduce_in_place = lambda t: dist.all_reduce(t, group=group)  # noqa: E731

    def reduce(t):
        t = t.contiguous()
        CALLS.append(time.perf_counter())
        reduce_in_place(t)
        CALLS.append(time.perf_counter())
        return t

    if faulty:
        def reduce(t, exact=reduce):  # noqa: F811: the second half stays this rank's own partial
            flat = t.contiguous().view(-1)
            own = flat[flat.numel() // 2:].clone()
            flat = exact(flat)
            flat[flat.numel() // 2:] = own
            return flat.view(t.shape)

    def gather(local):
        out = torch.empty((size * local.shape[0],) + tuple(local.shape[1:]), dtype=local.dtype)  # rank r's at block r
        local = local.contiguous()
        CALLS.append(time.perf_counter())
        gather_into(out, local)
        CALLS.append(time.perf_counter())
        return torch.cat(out.chunk(size), dim=-1)

    return reduce, gather


CALLS: list[float] = []  # entry and return of each collective call of the plain paths since decode() began


@torch.inference_mode()
def decode(model: Model, prompt: torch.Tensor, tokens: int) -> tuple[list[int], float, torch.Tensor]:
    """Greedy: the prompt in one step, then `tokens` steps of one token; returns the tokens, the decode seconds and
    the last step's logits (of the first sequence)."""
    model.reset_cache()
    ids = prompt
    out = []
    start = time.perf_counter()
    for step in range(tokens + 1):
        if step == 1:
            start = time.perf_counter()  # the prompt step is not decoding
            CALLS.clear()
        logits = model(ids)[:, -1].float()
        ids = logits.argmax(-1, keepdim=True)
        out.append(ids[0, 0].item())
    return out, time.perf_counter() - start, logits[0]


def _first_difference(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def near_tie(reference: torch.Tensor, logits: torch.Tensor, dtype) -> bool:
    """Two paths' logits at their first different token: is the difference rounding? Their largest difference is
    small against the logits' spread (a wrong sum moves them by far more), and at least half the gap between the two
    tokens in the reference's logits."""
    rounding = (logits - reference).abs().max()
    tolerance = 0.01 if dtype in (torch.float32, torch.float64) else 0.1
    gap = reference.max() - reference[logits.argmax()]
    return bool(rounding <= tolerance * reference.std() and gap <= 2 * rounding)


def check_split(args, size: int) -> None:
    if args.hidden % (size * args.head_dim) or args.ffn % size or args.vocab % size:
        raise SystemExit(f"ccl-bench --tp-decode: hidden ({args.hidden}) must split into whole heads of "
                         f"{args.head_dim} over {size} ranks, and ffn ({args.ffn}) and vocab ({args.vocab}) over {size}")


def run(args, dtype, groups: dict, paths: list[str], rank: int, size: int, barrier, slowest, ds_op=None):
    """Rows per path: tokens/s, ms per token, communication µs per token, over `args.rounds` rounds."""
    from torch.distributed.device_mesh import DeviceMesh
    prompt = torch.randint(0, args.vocab, (args.batch, 8), generator=torch.Generator().manual_seed(1))
    faulty = bool(os.environ.get("CCL_BENCH_FAULT"))
    models = {p: build(args, dtype, DeviceMesh.from_group(groups[p], "cpu"), p, groups[p], ds_op,
                       faulty and p == paths[-1] and p != paths[0])
              for p in ["fake", *paths]}
    for m in models.values():  # warm up: first calls allocate, and compile nothing
        decode(m, prompt, 2)
    times = {p: [] for p in models}
    comm = {p: [] for p in models}
    tokens = {}
    for _ in range(args.rounds):
        for p in ["fake", *paths]:  # interleaved: every path sees the same phases of the machine
            barrier()
            got, seconds, _ = decode(models[p], prompt, args.tokens)
            latest = slowest([seconds, *CALLS])  # every call's last entry and last return, over the ranks
            times[p].append(latest[0])
            comm[p].append(sum(latest[i + 1] - latest[i] for i in range(1, len(latest) - 1, 2)))
            tokens.setdefault(p, got)
    reference = tokens[paths[0]]
    verdicts = {"fake": "same"}
    for p in paths:  # every rank holds the same tokens and logits (gathered): every rank takes the same branch
        k = _first_difference(reference, tokens[p])
        if k is None:
            verdicts[p] = "same"
            continue
        at_k = [decode(models[q], prompt, k)[2] for q in (paths[0], p)]  # both saw the same tokens before k
        verdicts[p] = f"tie@{k}" if near_tie(*at_k, dtype) else "DIFFER"
    rows = []
    fake_per_token = sorted(t / args.tokens for t in times["fake"])
    fake_median = fake_per_token[len(fake_per_token) // 2]
    for p in ["fake", *paths]:
        per_token = sorted(t / args.tokens for t in times[p])
        median = per_token[len(per_token) // 2]
        inside = sorted(c / args.tokens for c in comm[p])
        comm_s = median - fake_median if p.startswith("dtensor-") else inside[len(inside) // 2]
        rows.append({"path": p, "ranks": size, "dtype": str(dtype).removeprefix("torch."), "batch": args.batch,
                     "hidden": args.hidden, "layers": args.layers, "tokens": args.tokens, "rounds": args.rounds,
                     "tokens_per_s": 1 / median, "ms_per_token": median * 1e3,
                     "ms_per_token_min": per_token[0] * 1e3, "ms_per_token_max": per_token[-1] * 1e3,
                     "comm_us_per_token": comm_s * 1e6, "comm_us_per_token_min": inside[0] * 1e6,
                     "comm_us_per_token_max": inside[-1] * 1e6, "compute_ms_per_token": fake_median * 1e3,
                     "same_tokens": verdicts[p] == "same", "tokens_check": verdicts[p]})
    return rows, all(r["tokens_check"] != "DIFFER" for r in rows)


def table(rows: list[dict]) -> str:
    head = (f"{'path':<22}{'tokens/s':>10}{'ms/token':>10}{'min':>8}{'max':>8}{'comm us/token':>15}{'min':>9}{'max':>9}"
            f"{'tokens':>8}")
    lines = [head, "-" * len(head)]
    for r in rows:
        dtensor = r["path"].startswith("dtensor-")  # time less fake's: no range of its own
        lo, hi = ("-", "-") if dtensor else (f"{r['comm_us_per_token_min']:.1f}", f"{r['comm_us_per_token_max']:.1f}")
        lines.append(f"{r['path']:<22}{r['tokens_per_s']:>10.1f}{r['ms_per_token']:>10.3f}{r['ms_per_token_min']:>8.3f}"
                     f"{r['ms_per_token_max']:>8.3f}{r['comm_us_per_token']:>15.1f}{lo:>9}{hi:>9}"
                     f"{r['tokens_check']:>8}")
    return "\n".join(lines)
