"""A training script that fails in its second step (no profiler code)."""
import torch
import torch.nn as nn


def main():
    model = nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(20):
        if step == 1:
            raise RuntimeError("loss became NaN at step 2")
        model(torch.randn(8, 16)).sum().backward()
        opt.step()


if __name__ == "__main__":
    main()
