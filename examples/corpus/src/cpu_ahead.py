"""The CPU running far ahead of the GPU: each step queues 24 bf16 GEMMs of 8192^3 (about 1.4 ms
each on an H200) and nothing waits for them, so CPU-side ProfilerStep ranges are short while the
GPU needs ~35 ms a step and the profiler's closing sync waits for the whole backlog."""
import argparse, torch
from _prof import export, profiler, steps


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gemms", type=int, default=24)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        x @ w
    torch.cuda.synchronize()
    with profiler(active=3) as prof:
        for _ in range(steps(3)):
            y = x
            for _ in range(a.gemms):
                y = torch.matmul(y, w) * 1e-4
            prof.step()
    export(prof, a.out, gemms=a.gemms)


if __name__ == "__main__":
    main()
