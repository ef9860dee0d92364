"""A compiled bf16 MLP whose forward breaks the graph with a print() in the middle, warmed up,
then five calls profiled in one block with no steps: every call runs two compiled regions with
eager code between."""
import sys
import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile


class Net(nn.Module):
    def __init__(self, d=2048):
        super().__init__()
        self.first = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, d), nn.GELU())
        self.second = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, d))

    def forward(self, x):
        h = self.first(x)
        print("hidden", h.shape)
        return self.second(h)


def main(out):
    torch.manual_seed(0)
    model = torch.compile(Net().cuda().to(torch.bfloat16))
    x = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        for _ in range(3):
            model(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True,
                     record_shapes=True) as prof:
            for _ in range(5):
                y = model(x)
            torch.cuda.synchronize()
    print(y.shape)
    prof.export_chrome_trace(out)


if __name__ == "__main__":
    main(sys.argv[1])
