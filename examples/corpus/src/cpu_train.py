"""A CPU-only training loop (no CUDA at all): a 3-layer MLP with Adam left at its defaults, so torch
picks the single-tensor path, the right one on CPU."""
import argparse, torch, torch.nn as nn
from _prof import export, profiler, steps


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(4)
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(128, 512)
    y = torch.randint(0, 10, (128,))
    for _ in range(3):
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    with profiler(active=3, cuda=False) as prof:
        for _ in range(steps(3)):
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    export(prof, a.out, cuda=False)


if __name__ == "__main__":
    main()
