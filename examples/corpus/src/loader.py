"""A DataLoader-fed training loop whose __getitem__ decodes a synthetic 3x96x96 image with numpy
(a few ms per batch of 64): --workers 0 builds every batch in the main process while the GPU
waits; --workers 4 --pin builds them in 4 worker processes ahead of time into pinned memory."""
import argparse, time, numpy as np, torch, torch.nn as nn
from torch.utils.data import DataLoader, Dataset
from _prof import export, profiler, steps


class Images(Dataset):
    def __len__(self):
        return 1 << 14

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        img = rng.integers(0, 255, (96, 96, 3), dtype=np.uint8).astype(np.float32) / 255.0
        img = (img - img.mean(axis=(0, 1))) / (img.std(axis=(0, 1)) + 1e-6)
        img = np.ascontiguousarray(np.flip(img, axis=1).transpose(2, 0, 1))
        return torch.from_numpy(img), i % 10


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--pin", action="store_true")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32),
                          nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    dl = DataLoader(Images(), batch_size=64, num_workers=a.workers, pin_memory=a.pin,
                    persistent_workers=a.workers > 0, prefetch_factor=4 if a.workers else None)
    it = iter(dl)
    for _ in range(3):
        xb, yb = next(it)
        nn.functional.cross_entropy(model(xb.cuda()), yb.cuda()).backward()
        opt.step()
        opt.zero_grad()
    torch.cuda.synchronize()
    time.sleep(1.0 if a.workers else 0.0)  # the workers fill their prefetch queue
    with profiler(active=3) as prof:
        for _ in range(steps(3)):
            xb, yb = next(it)
            xb = xb.to("cuda", non_blocking=a.pin)
            yb = yb.to("cuda", non_blocking=a.pin)
            loss = nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    export(prof, a.out, workers=a.workers, pin=a.pin)


if __name__ == "__main__":
    main()
