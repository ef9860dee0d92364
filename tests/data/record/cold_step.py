"""A small CPU training loop whose fourth step alone does one-time work (profd-client record's
tests). On a GPU that is the first call of an op the warm-up never ran (lazy kernel loading,
cuDNN/cuBLAS set-up: 40 ms against 1.3 ms steps in an H200 eval loop); here a 0.5 s sleep stands in
for it, since the CPU has no such set-up to show."""
import time

import torch
import torch.nn as nn


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 128)
    y = torch.randint(0, 10, (32,))
    for step in range(40):
        if step == 3:
            time.sleep(0.5)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
    print("final loss", loss.item())


if __name__ == "__main__":
    main()
