"""A profile that covers torch.compile compiling: the first call of a compiled bf16 MLP (d 4096,
batch 8192) runs Dynamo, AOTAutograd and Inductor (codegen, Triton compilation) inside the
profiled window; five inference calls in all, no steps."""
import sys
import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile


def main(out):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4096, 4096), nn.GELU(), nn.Linear(4096, 4096), nn.GELU(),
                          nn.Linear(4096, 4096)).cuda().to(torch.bfloat16)
    fast = torch.compile(model)
    x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
            for _ in range(5):
                y = fast(x)
            torch.cuda.synchronize()
    print(y.float().abs().mean().item())
    prof.export_chrome_trace(out)


if __name__ == "__main__":
    main(sys.argv[1])
