"""Profiling from the very first step, with no warm-up: a bf16 MLP (d 2048, 4 layers) trained
with fused AdamW under a profiler with no schedule (everything from the first launch on is
recorded; prof.step() still marks the steps). The first step pays CUDA's lazy module loading,
cuBLAS handle and workspace creation and the first launch of every kernel; later steps do not."""
import argparse, torch, torch.nn as nn
from torch.profiler import ProfilerActivity, profile
from models import mlp
from _prof import export


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    model = mlp(d=2048, depth=4).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randn(1024, 2048, device="cuda")
    y = torch.randint(0, 10, (1024,), device="cuda")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                 with_stack=True) as prof:
        for _ in range(4):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    export(prof, a.out)


if __name__ == "__main__":
    main()
