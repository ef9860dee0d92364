"""Many small parameters, a single-tensor optimizer: 32 blocks of nn.Linear(256, 256) +
nn.LayerNorm(256) (128 parameter tensors, 2.1 M parameters), batch 256, bf16 autocast, SGD with
momentum and foreach=False (a Python loop over the parameters, a few kernels each)."""
import argparse, torch, torch.nn as nn
from _prof import export, profiler, steps, unprofiled_us


class Narrow(nn.Module):
    def __init__(self, d=256, depth=32):
        super().__init__()
        self.lins = nn.ModuleList(nn.Linear(d, d) for _ in range(depth))
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(depth))

    def forward(self, x):
        for lin, norm in zip(self.lins, self.norms):
            x = x + torch.relu(lin(norm(x)))
        return x


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    model = Narrow().to(a.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=False)
    x = torch.randn(256, 256, device=a.device)

    def step():
        with torch.autocast(a.device, dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    us = unprofiled_us(step, 5)
    with profiler(active=2, cuda=a.device == "cuda") as prof:
        for _ in range(steps(2)):
            step()
            prof.step()
    export(prof, a.out, params=len(list(model.parameters())), unprofiled_us_per_step=us)


if __name__ == "__main__":
    main()
