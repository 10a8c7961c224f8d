"""The least a training step can cost: one process, no wrapper, no metrics, no checkpoints.

Same model, data, batch and optimizer as the trainer's defaults; batches are slices of one
in-memory permutation. Prints one JSON line: {"samples_per_s": ..., "samples_per_cpu_s": ..., "steps": ...}.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

from ddpctl_trainer.data import synthetic
from ddpctl_trainer.models import build_model


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="convnet")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--samples", type=int, default=1024)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    args = p.parse_args()

    data = synthetic(args.samples, 10, args.image_size, seed=0)
    torch.manual_seed(0)
    model = build_model(args.model, 10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model.train()
    step, t0, c0, epoch = 0, 0.0, 0.0, 0
    while step < args.warmup + args.steps:
        # the trainer's sample order (DistributedSampler, seed 0, one process): the same
        # trajectory, so both runs meet the same numbers (denormals are slow on CPUs)
        perm = torch.randperm(args.samples, generator=torch.Generator().manual_seed(epoch))
        epoch += 1
        for start in range(0, args.samples - args.batch_size + 1, args.batch_size):
            idx = perm[start : start + args.batch_size]
            x, y = data.images.index_select(0, idx), data.labels.index_select(0, idx)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if step == args.warmup:
                t0, c0 = time.perf_counter(), time.process_time()
            if step == args.warmup + args.steps:
                break
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    samples = args.steps * args.batch_size
    print(
        json.dumps({"samples_per_s": samples / wall, "samples_per_cpu_s": samples / cpu, "steps": args.steps}),
        flush=True,
    )


if __name__ == "__main__":
    main()
