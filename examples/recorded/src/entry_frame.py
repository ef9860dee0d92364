"""The commonest script: the profiler opened inside main(), no schedule, the loop written right
there. main() is already running when the profiler starts, so its frame is named by the line it
was at (the ``with profile(...)``), not its ``def``; the loop's statements are its own.

    python entry_frame.py --out DIR/entry_frame_cpu     # CPU activity only (no GPU needed)
"""
import argparse
import gzip
import os
import shutil

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=8)
    a = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512))
    crit = nn.MSELoss()
    x = torch.randn(256, 512)
    total = 0
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True,
                 with_stack=True) as prof:
        for _ in range(a.steps):
            out = model(x)
            total = total + crit(out, x)
    print("mean loss", float(total) / a.steps)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    prof.export_chrome_trace(a.out + ".json")
    with open(a.out + ".json", "rb") as src, gzip.open(a.out + ".json.gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    os.remove(a.out + ".json")


if __name__ == "__main__":
    main()
