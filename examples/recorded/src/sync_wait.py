"""Explicit torch.cuda.synchronize() in the loop.
--variant busy: queue ~20 large bf16 GEMMs, then synchronize (the CPU waits while the GPU drains);
--variant idle: synchronize after each of 40 tiny ops (the CPU waits on launch latency, the GPU
mostly idle); --variant none: the busy loop without the sync (twin)."""
import argparse, torch
from _prof import export, profiler


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--variant", choices=["busy", "idle", "none"], default="busy")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    a_ = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b_ = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(256, device="cuda")

    def busy(sync):
        y = a_
        for _ in range(20):
            y = torch.matmul(y, b_) * 0.01
        if sync:
            torch.cuda.synchronize()
        return y

    def idle():
        t = v
        for _ in range(40):
            t = t * 1.0001
            torch.cuda.synchronize()
        return t

    step = {"busy": lambda: busy(True), "idle": idle, "none": lambda: busy(False)}[a.variant]
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profiler(active=3) as prof:
        for _ in range(5):
            step()
            prof.step()
    export(prof, a.out, variant=a.variant)


if __name__ == "__main__":
    main()
