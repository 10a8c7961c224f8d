# Modelled on Lightning-AI/pytorch-lightning examples/fabric/image_classifier/train_fabric.py: Fabric
# sets up the processes.
import torch
from lightning.fabric import Fabric
from torch.utils.data import DataLoader, TensorDataset


def run():
    fabric = Fabric(accelerator="cuda", devices=2, strategy="ddp")
    fabric.launch()
    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    loader = fabric.setup_dataloaders(DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=8, shuffle=True))
    for (x,) in loader:
        loss = model(x).sum()
        fabric.backward(loss)
        optimizer.step()
    fabric.save("checkpoint.ckpt", {"model": model, "optimizer": optimizer})


if __name__ == "__main__":
    run()
