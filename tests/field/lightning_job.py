"""Lightning on CPU as a user runs it, started by torchrun: DDPStrategy(process_group_backend=<backend>), two
epochs of a small regression. Each rank writes its per-step losses, the final weights and the backend it ran on
to <out>.<rank>.

    torchrun --nproc-per-node 2 lightning_job.py --backend ccl --out result
"""
import argparse
import json

import pytorch_lightning as pl
import torch
from pytorch_lightning.strategies import DDPStrategy
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--backend", choices=["ccl", "gloo"], required=True)
parser.add_argument("--out", required=True)
args = parser.parse_args()

class Regression(pl.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
        self.losses = []

    def training_step(self, batch, _):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

def data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 16, generator=g)
    return DataLoader(TensorDataset(x, x[:, :4].sum(dim=1, keepdim=True).sin()), batch_size=16)

model = Regression()
trainer = pl.Trainer(accelerator="cpu", devices=2, strategy=DDPStrategy(process_group_backend=args.backend),
                     max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, deterministic=True)
trainer.fit(model, data())

import torch.distributed as dist  # noqa: E402 - the group exists only inside fit; ask the strategy

rank = trainer.global_rank
result = {
    "backend": trainer.strategy.process_group_backend,
    "losses": model.losses,
    "weights": [p.detach().flatten().tolist() for p in model.parameters()],
}
with open(f"{args.out}.{rank}", "w") as f:
    json.dump(result, f)
# Lightning leaves its group alive; torch asks for this before exit. Once in CI (torch 2.13), a gloo job that left it
# to the interpreter's teardown ended in "terminate called without an active exception" after writing its results.
if dist.is_initialized():
    dist.destroy_process_group()
