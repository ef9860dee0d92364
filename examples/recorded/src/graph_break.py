"""A torch.compile'd MLP trained for a few steps. --variant break: forward tests a tensor in a
Python `if` (line 25), which Dynamo cannot trace: the graph breaks there, the test runs eagerly
as a device->host sync, and the rest of forward runs as a second compiled graph
(torch_dynamo_resume_in_forward_at_25). --variant whole: the same model without the test (twin)."""
import argparse, torch
from torch import nn
from _prof import export, profiler


class Net(nn.Module):
    def __init__(self, d, brk):
        super().__init__()
        self.brk = brk
        self.l1 = nn.Linear(d, 4 * d)
        self.l2 = nn.Linear(4 * d, d)
        self.l3 = nn.Linear(d, 4 * d)
        self.l4 = nn.Linear(4 * d, d)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.l1(x))
        h = self.l2(h) + x
        # (a blank line keeps the break on line 25 in both variants)

        if self.brk:
            if h.mean() > 0:  # data-dependent branch: graph break + host sync
                h = h * 0.5
        h = torch.nn.functional.gelu(self.l3(h))
        return self.l4(h) + h[..., : x.shape[-1]]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--variant", choices=["break", "whole"], default="break")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    model = Net(1024, a.variant == "break").cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    cmodel = torch.compile(model)
    x = torch.randn(64, 256, 1024, device="cuda")
    y = torch.randn(64, 256, 1024, device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(cmodel(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    with profiler(active=3) as prof:
        for _ in range(5):
            step()
            prof.step()
    export(prof, a.out, variant=a.variant)


if __name__ == "__main__":
    main()
