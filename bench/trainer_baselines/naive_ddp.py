"""The article's DDP recipe, written the way the article writes it, as a benchmark baseline.

Kept deliberately naive (this is what the trainer is compared against), except for the two
things that would make it wrong rather than slow: the device index comes from LOCAL_RANK (the
article's ``--local_rank`` argv is gone under torchrun) and nothing is written to disk.
What stays naive: a per-sample Dataset (the trainer's synthetic tensors) with default collation,
two DataLoader workers per process, a progress bar whose description shows the loss every
step (a ``.item()`` host sync and a terminal write per step), DDP with default settings.

Prints one JSON line on rank 0: {"samples_per_s": ..., "steps": ...} measured after warm-up.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler
from tqdm import tqdm


class SampleDataset(Dataset):
    """The same synthetic images as the trainer's, served one sample at a time (the article's way)."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        return self.images[i], int(self.labels[i])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="resnet18")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--num-workers", type=int, default=2)
    args = p.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group(backend="gloo")
    device = torch.device("cpu")

    from ddpctl_trainer.data import synthetic  # the very tensors the trainer's default dataset holds

    data = synthetic(args.samples, 10, args.image_size, seed=0)
    dataset = SampleDataset(data.images, data.labels)
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=args.batch_size, num_workers=args.num_workers, sampler=sampler)

    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models, args.model)(num_classes=10).to(device)
    model = DDP(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_func = nn.CrossEntropyLoss().to(device)

    model.train()
    step, t0 = 0, None
    iterator = tqdm(range(1000), disable=dist.get_rank() != 0, file=sys.stderr)
    for epoch in iterator:
        sampler.set_epoch(epoch)
        for data, label in loader:
            data, label = data.to(device), label.to(device)
            optimizer.zero_grad()
            prediction = model(data)
            loss = loss_func(prediction, label)
            loss.backward()
            iterator.desc = f"loss = {loss:0.3f}"
            optimizer.step()
            step += 1
            if step == args.warmup:
                t0 = time.perf_counter()
            if step == args.warmup + args.steps:
                break
        if step >= args.warmup + args.steps:
            break
    elapsed = time.perf_counter() - t0
    rate = args.steps * args.batch_size * dist.get_world_size() / elapsed
    if dist.get_rank() == 0:
        print(json.dumps({"samples_per_s": rate, "steps": args.steps, "local_rank": local_rank}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
