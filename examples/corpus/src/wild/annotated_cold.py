"""The whole script under the profiler, model construction and first calls included, each
iteration labelled with record_function("train_iter") (no prof.step()): a cold process where the
first linear layer pays cuBLAS/cuBLASLt handle creation and lazy kernel loading. A bf16 MLP
(d 2048, batch 4096), six iterations."""
import sys
import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile, record_function


def main(out):
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True,
                 record_shapes=True) as prof:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(2048, 8192), nn.GELU(), nn.Linear(8192, 2048)).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        x = torch.randn(4096, 2048, device="cuda")
        for _ in range(6):
            with record_function("train_iter"):
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(x).float().pow(2).mean()
                loss.backward()
                opt.step()
                opt.zero_grad()
        torch.cuda.synchronize()
    prof.export_chrome_trace(out)


if __name__ == "__main__":
    main(sys.argv[1])
