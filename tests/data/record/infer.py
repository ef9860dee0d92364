"""An inference loop with no profiler code and no optimizer: steps are the model's calls
(record --step forward). Autograd is left on and every output is kept, so each call's graph and
activations stay alive: allocated memory grows call after call."""
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(128, 1024), nn.GELU(), nn.Linear(1024, 1024))
        self.head = nn.Linear(1024, 8)

    def forward(self, x):
        return self.head(self.body(x))


def main():
    torch.manual_seed(0)
    model = Net().eval()
    keep = []
    for i in range(40):
        x = torch.randn(256, 128)
        keep.append(model(x))
    print("outputs", len(keep))


if __name__ == "__main__":
    main()
