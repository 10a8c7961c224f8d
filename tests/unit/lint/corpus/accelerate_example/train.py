# Modelled on huggingface/accelerate examples/nlp_example.py: Accelerate wraps the model and loaders.
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset


def training_function():
    accelerator = Accelerator()
    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,))), batch_size=8, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        torch.save(accelerator.unwrap_model(model).state_dict(), "model.pt")


if __name__ == "__main__":
    training_function()
