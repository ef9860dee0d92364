"""A small CPU training script with no profiler code (profd-client record's tests): an MLP trained
with SGD; zero_grad(set_to_none=False) writes zeros into every gradient each step."""
import torch
import torch.nn as nn


def train_step(model, opt, x, y):
    opt.zero_grad(set_to_none=False)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(64, 256)
    y = torch.randint(0, 10, (64,))
    for step in range(60):
        loss = train_step(model, opt, x, y)
    print("final loss", loss.item())


if __name__ == "__main__":
    main()
