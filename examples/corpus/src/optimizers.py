"""The optimizer step of a 16-block model (d 1024: 98 parameter tensors, 134 M parameters),
AdamW three ways: --impl single (foreach=False: one kernel per parameter per op), --impl foreach
(the default on CUDA: multi-tensor kernels), --impl fused (fused=True: one fused kernel)."""
import argparse, torch, torch.nn as nn
from models import Blocks
from _prof import export, profiler, steps


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--impl", choices=["single", "foreach", "fused"], required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    model = Blocks(d=1024, depth=16).cuda()
    kw = {"single": dict(foreach=False), "foreach": {}, "fused": dict(fused=True)}[a.impl]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **kw)
    x = torch.randn(16, 64, 1024, device="cuda")
    y = torch.randint(0, 10, (16, 64), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profiler(active=3) as prof:
        for _ in range(steps(3)):
            step()
            prof.step()
    export(prof, a.out, impl=a.impl)


if __name__ == "__main__":
    main()
