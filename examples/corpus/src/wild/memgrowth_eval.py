"""A validation loop without no_grad that sums the loss tensors (`total = total + loss`): every
batch's autograd graph stays alive, so allocated memory grows batch after batch. profile_memory,
one block around 12 batches, no steps."""
import sys
import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile


def main(out):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).cuda()
    crit = nn.MSELoss()
    batches = [torch.randn(2048, 1024, device="cuda") for _ in range(12)]
    crit(model(batches[0]), batches[0])
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True,
                 record_shapes=True, profile_memory=True) as prof:
        total = 0
        for x in batches:
            out_ = model(x)
            total = total + crit(out_, x)
        print("val loss", float(total) / len(batches))
    prof.export_chrome_trace(out)


if __name__ == "__main__":
    main(sys.argv[1])
