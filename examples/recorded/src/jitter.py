"""Provoked kernel jitter inside one process: an n x n (--n, default 2048) bf16 GEMM on the default stream, 4 per step,
while a side stream runs 8192 GEMMs on random steps and shares the SMs (--side), or alone (twin)."""
import argparse, random, torch
from _prof import export, profiler


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--side", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--active", type=int, default=10)
    p.add_argument("--n", type=int, default=2048)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    x = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
    big = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    rnd = random.Random(0)
    def step():
        if a.side and rnd.random() < 0.5:
            with torch.cuda.stream(side):
                big @ big
        y = x
        for _ in range(4):
            y = (y @ x) * 0.01
        return y
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profiler(active=a.active, record_shapes=False, with_stack=False) as prof:
        for _ in range(2 + a.active):
            step()
            prof.step()
    export(prof, a.out, side=a.side, n=a.n)


if __name__ == "__main__":
    main()
