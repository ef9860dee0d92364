"""The profiled side of the gpu-contention recording: a 4096 bf16 matmul + bias with a little CPU
work between steps (so this process's GPU lane has idle moments), 20 active steps. Run it alone
(twin) and while contender.py runs on the same GPU."""
import argparse, time, torch
from _prof import export, profiler


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--active", type=int, default=20)
    p.add_argument("--label", default="alone")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        y = x @ w + b
    torch.cuda.synchronize()
    with profiler(active=a.active, record_shapes=True, with_stack=True) as prof:
        for _ in range(2 + a.active):
            y = x @ w + b
            time.sleep(0.0005)  # host-side work between steps
            prof.step()
    export(prof, a.out, label=a.label, active=a.active)


if __name__ == "__main__":
    main()
