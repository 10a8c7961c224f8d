# Modelled on pytorch/examples distributed/minGPT-ddp/mingpt/trainer.py: snapshots on local rank 0.
import os

import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


class Trainer:
    def __init__(self, model, optimizer, train_dataset, save_every, snapshot_path="snapshot.pt"):
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.global_rank = int(os.environ["RANK"])
        self.train_loader = DataLoader(
            train_dataset, batch_size=8, pin_memory=True, shuffle=False, sampler=DistributedSampler(train_dataset)
        )
        self.model = DDP(model.to(self.local_rank), device_ids=[self.local_rank])
        self.optimizer = optimizer
        self.save_every = save_every
        self.snapshot_path = snapshot_path

    def _run_epoch(self, epoch):
        self.train_loader.sampler.set_epoch(epoch)
        for (source,) in self.train_loader:
            self.optimizer.zero_grad(set_to_none=True)
            loss = self.model(source.to(self.local_rank)).pow(2).mean()
            loss.backward()
            self.optimizer.step()

    def _save_snapshot(self, epoch):
        model = self.model.module if hasattr(self.model, "module") else self.model
        torch.save({"MODEL_STATE": model.state_dict(), "EPOCHS_RUN": epoch}, self.snapshot_path)

    def train(self, max_epochs):
        for epoch in range(max_epochs):
            self._run_epoch(epoch)
            if self.local_rank == 0 and epoch % self.save_every == 0:
                self._save_snapshot(epoch)
