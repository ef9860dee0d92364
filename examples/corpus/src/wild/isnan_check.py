"""A mixture-of-experts layer stack with a NaN guard in every layer (`if torch.isnan(h).any():`),
each a device->host sync; bf16, four forward+backward iterations profiled in one block after a
warm-up, no steps."""
import sys
import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile


class MoE(nn.Module):
    def __init__(self, d=1024, experts=4):
        super().__init__()
        self.gate = nn.Linear(d, experts)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
                                     for _ in range(experts))

    def forward(self, x):
        choice = self.gate(x).argmax(-1)
        h = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            h = h + expert(x) * (choice == e).unsqueeze(-1)
        if torch.isnan(h).any():
            raise FloatingPointError("NaN in MoE output")
        return x + h


def main(out):
    torch.manual_seed(0)
    model = nn.Sequential(*[MoE() for _ in range(6)]).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(4096, 1024, device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()

    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True,
                 record_shapes=True) as prof:
        for _ in range(4):
            step()
        torch.cuda.synchronize()
    prof.export_chrome_trace(out)


if __name__ == "__main__":
    main(sys.argv[1])
