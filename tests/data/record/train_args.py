"""A training script that parses its own arguments (one required) and loads batches with a
DataLoader over 2 worker processes, which record must not profile. No profiler code."""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, required=True)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--batch", type=int, default=32)
    a = p.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(1024, 64), torch.randint(0, 4, (1024,)))
    loader = DataLoader(data, batch_size=a.batch, shuffle=True, num_workers=2)
    model = nn.Sequential(nn.Linear(64, 128), nn.Tanh(), nn.Linear(128, 4))
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    for epoch in range(a.epochs):
        for xb, yb in loader:
            loss = nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
    print("epochs", a.epochs, "lr", a.lr, "loss", float(loss))


if __name__ == "__main__":
    main()
