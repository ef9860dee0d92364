"""CPU activity only (`activities=[ProfilerActivity.CPU]`) around a GPU training loop: the trace
has the aten ops (on CUDA tensors) and Python frames but no kernels and no runtime calls. The loop
logs `loss.item()` every iteration (a device->host sync)."""
import sys
import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile


def main(out):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(2048, 1024, device="cuda")
    for _ in range(3):
        model(x).sum().backward()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU], with_stack=True, record_shapes=True) as prof:
        for it in range(10):
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            print(it, loss.item())
    prof.export_chrome_trace(out)


if __name__ == "__main__":
    main(sys.argv[1])
