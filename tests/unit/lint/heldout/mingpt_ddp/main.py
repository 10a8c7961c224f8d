# Modelled on pytorch/examples distributed/minGPT-ddp/mingpt/main.py and trainer.py.
import os

import torch
from torch.distributed import destroy_process_group, init_process_group
from trainer import Trainer


def ddp_setup():
    init_process_group(backend="nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))


def main():
    ddp_setup()
    model = torch.nn.Linear(16, 16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    dataset = torch.utils.data.TensorDataset(torch.randn(128, 16))
    Trainer(model, optimizer, dataset, save_every=1).train(max_epochs=2)
    destroy_process_group()


if __name__ == "__main__":
    main()
