"""Data-parallel training on the CPU with the gloo backend, for torchrun (no profiler code):
torchrun --nproc_per_node 2 ddp_gloo.py"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = DDP(nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 16)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(40):
        x = torch.randn(32, 128)
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()
    print("rank", rank, "done", os.environ.get("LOCAL_RANK"))


if __name__ == "__main__":
    main()
