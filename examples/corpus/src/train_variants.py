"""Everyday training-loop variants over the same block model (d 1024, 8 blocks, batch 64 x 128
tokens) with batches already on the GPU:
  steps50    - plain bf16-autocast training, 50 profiled steps, fused AdamW (2 blocks)
  scaler     - fp16 autocast with torch.amp.GradScaler
  accum      - gradient accumulation over 4 micro-batches per optimizer step
  checkpoint - activation checkpointing of every block (torch.utils.checkpoint, non-reentrant)
"""
import argparse, torch, torch.nn as nn
from torch.utils.checkpoint import checkpoint
from models import Blocks
from _prof import export, profiler, steps


class CheckpointedBlocks(Blocks):
    def forward(self, x):
        for blk in self.blocks:
            x = x + checkpoint(blk, x, use_reentrant=False)
        return self.head(x)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--variant", choices=["steps50", "scaler", "accum", "checkpoint"], required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    depth = 2 if a.variant == "steps50" else 8  # 50 steps of a shallower model keep the trace small
    model = (CheckpointedBlocks() if a.variant == "checkpoint" else Blocks(depth=depth)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    scaler = torch.amp.GradScaler("cuda")
    micro = 4 if a.variant == "accum" else 1
    x = torch.randn(64, 128, 1024, device="cuda")
    y = torch.randint(0, 10, (64, 128), device="cuda")

    def loss_of(xb, yb, dtype):
        with torch.autocast("cuda", dtype=dtype):
            return nn.functional.cross_entropy(model(xb).flatten(0, 1), yb.flatten())

    def step():
        if a.variant == "scaler":
            loss = loss_of(x, y, torch.float16)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            for xb, yb in zip(x.chunk(micro), y.chunk(micro)):
                loss = loss_of(xb, yb, torch.bfloat16) / micro
                loss.backward()
            opt.step()
        opt.zero_grad()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    active = 50 if a.variant == "steps50" else 3
    with profiler(active=active, profile_memory=a.variant == "checkpoint",
                  with_stack=True, record_shapes=True) as prof:
        for _ in range(steps(active)):
            step()
            prof.step()
    export(prof, a.out, variant=a.variant, active=active)


if __name__ == "__main__":
    main()
