"""CUDA activity only (`activities=[ProfilerActivity.CUDA]`): a warmed-up bf16 MLP (d 4096,
batch 8192) trained for eight iterations; the trace has the GPU's kernels and the runtime calls,
no CPU ops and no Python frames."""
import sys
import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile


def main(out):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                          nn.Linear(4096, 4096)).cuda().to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)

    def step():
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(8):
            step()
        torch.cuda.synchronize()
    prof.export_chrome_trace(out)


if __name__ == "__main__":
    main(sys.argv[1])
