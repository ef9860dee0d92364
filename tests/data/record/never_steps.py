"""Training with a hand-written update and no torch.optim optimizer: no Optimizer.step() ever
ends a step. --seconds S: run that long (default: a few steps, then exit)."""
import argparse
import time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=0.0)
    a = p.parse_args()
    w = torch.randn(32, 32, requires_grad=True)
    t0 = time.monotonic()
    n = 0
    while n < 5 or time.monotonic() - t0 < a.seconds:
        (torch.randn(8, 32) @ w).square().mean().backward()
        with torch.no_grad():
            w -= 0.01 * w.grad
            w.grad = None
        n += 1
        time.sleep(0.01)


if __name__ == "__main__":
    main()
