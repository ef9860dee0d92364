"""A small CNN training step: Conv2d -> BatchNorm2d -> ReLU, twice. --bias puts a bias on the
convolutions (wasted: the batch norm subtracts it right back out); the fixed twin uses bias=False."""
import argparse, torch, torch.nn as nn
from _prof import export, profiler


def build(bias):
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1, bias=bias), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1, bias=bias), nn.BatchNorm2d(64), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).cuda()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bias", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    model = build(a.bias)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(32, 3, 32, 32, device="cuda")
    y = torch.randint(0, 10, (32,), device="cuda")
    for _ in range(3):  # warm-up outside the profiler
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward(); opt.step(); opt.zero_grad()
    torch.cuda.synchronize()
    with profiler(active=3) as prof:
        for _ in range(5):
            out = model(x)
            loss = nn.functional.cross_entropy(out, y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    export(prof, a.out, bias=a.bias)


if __name__ == "__main__":
    main()
