"""The profiler's defaults (no with_stack, no record_shapes) around ten training iterations of a
small MLP whose batches are drawn on the CPU and copied with `.to("cuda")` from pageable memory;
AdamW (its `Optimizer.step#AdamW.step` labels are the only marks of an iteration), no steps."""
import sys
import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile


def main(out):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(2):
        model(torch.randn(128, 256, device="cuda")).sum().backward()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            x = torch.randn(128, 256).to("cuda")
            y = torch.randint(0, 10, (128,)).to("cuda")
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
        torch.cuda.synchronize()
    prof.export_chrome_trace(out)


if __name__ == "__main__":
    main(sys.argv[1])
