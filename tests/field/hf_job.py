"""Hugging Face Accelerate and Trainer on CPU as a user runs them, started by torchrun.

Accelerate >= 1.13 and Transformers 5 no longer accept backend="ccl" (Accelerate raises "Your assigned backend ccl
is not available"). They do accept a default process group that already exists, and use it for everything:
so the ccl run creates it first, in one line, and the gloo run lets Accelerate create its own.

    torchrun --nproc-per-node 2 hf_job.py --backend ccl --api trainer --out result
"""
import argparse
import json
import os
import tempfile

import torch
import torch.distributed as dist
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--backend", choices=["ccl", "gloo"], required=True)
parser.add_argument("--api", choices=["accelerate", "trainer"], required=True)
parser.add_argument("--out", required=True)
args = parser.parse_args()

if args.backend == "ccl":
    dist.init_process_group("ccl")  # the whole workaround: before Accelerator() / TrainingArguments()


class Regression(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, x, labels=None):
        out = self.net(x)
        return {"loss": nn.functional.mse_loss(out, labels), "logits": out}


def samples():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(128, 16, generator=g)
    y = x[:, :4].sum(dim=1, keepdim=True).sin()
    return [{"x": x[i], "labels": y[i]} for i in range(len(x))]


def with_accelerate():
    from accelerate import Accelerator
    from torch.utils.data import DataLoader

    accelerator = Accelerator(cpu=True)
    model = Regression()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(samples(), batch_size=8, shuffle=False)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses = []
    for batch in loader:
        loss = model(**batch)["loss"]
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(accelerator.gather(loss.detach()).tolist())  # a collective of Accelerate's own
    return losses, accelerator.unwrap_model(model)


def with_trainer():
    from transformers import Trainer, TrainingArguments

    model = Regression()
    with tempfile.TemporaryDirectory() as out:
        training = TrainingArguments(output_dir=out, use_cpu=True, per_device_train_batch_size=8, num_train_epochs=1,
                                     learning_rate=0.1, optim="sgd", lr_scheduler_type="constant", logging_steps=1,
                                     save_strategy="no", report_to=[], seed=0, disable_tqdm=True,
                                     dataloader_num_workers=0)
        trainer = Trainer(model=model, args=training, train_dataset=samples())
        trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return losses, model


losses, model = with_accelerate() if args.api == "accelerate" else with_trainer()
result = {
    "backend": dist.get_backend(),
    "losses": losses,
    "weights": [p.detach().flatten().tolist() for p in model.parameters()],
}
with open(f"{args.out}.{dist.get_rank()}", "w") as f:
    json.dump(result, f)
dist.barrier()
dist.destroy_process_group()
