# Modelled on pytorch/examples mnist/main.py: one process, no process group.
import torch
from torch import nn
from torchvision import datasets, transforms


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    transform = transforms.Compose([transforms.ToTensor()])
    dataset1 = datasets.MNIST("../data", train=True, download=True, transform=transform)
    train_loader = torch.utils.data.DataLoader(dataset1, batch_size=64, shuffle=True)
    model = nn.Linear(784, 10).to(device)
    for data, target in train_loader:
        loss = nn.functional.cross_entropy(model(data.view(-1, 784).to(device)), target.to(device))
        loss.backward()
    torch.save(model.state_dict(), "mnist_cnn.pt")


if __name__ == "__main__":
    main()
