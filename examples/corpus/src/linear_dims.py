"""A bf16 nn.Linear on activations with leading dims [16, 559] (a batch of 16 sequences of 559
tokens: M = 8944, a multiple of 8): --dims aligned uses 1024 -> 4096 features (every GEMM dim a
multiple of 8, tensor-core kernels); --dims odd uses 1023 -> 4095 (K and N misaligned)."""
import argparse, torch, torch.nn as nn
from _prof import export, profiler, steps, unprofiled_us


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dims", choices=["aligned", "odd"], default="aligned")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    d_in, d_out = (1024, 4096) if a.dims == "aligned" else (1023, 4095)
    proj = nn.Linear(d_in, d_out).cuda().to(torch.bfloat16)
    x = torch.randn(16, 559, d_in, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        per_iter = unprofiled_us(lambda: proj(x), iters=20)
        with profiler(active=3) as prof:
            for _ in range(steps(3)):
                h = proj(x)
                h = torch.relu(h)
                prof.step()
    export(prof, a.out, dims=a.dims, d_in=d_in, d_out=d_out, unprofiled_us_per_iter=per_iter)


if __name__ == "__main__":
    main()
