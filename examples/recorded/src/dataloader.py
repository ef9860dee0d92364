"""Training fed by a DataLoader whose __getitem__ does heavy per-sample numpy work.
--workers 0: the main process builds every batch while the GPU waits (dataloader-bound);
--workers 8 --pin: worker processes build batches ahead, pinned, copied non_blocking (fixed twin)."""
import argparse, time, numpy as np, torch, torch.nn as nn
from torch.utils.data import DataLoader, Dataset
from _prof import export, profiler


class Noisy(Dataset):
    def __len__(self):
        return 1 << 16

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        img = rng.standard_normal((64, 64)).astype(np.float32)
        for _ in range(4):  # "augmentation": a few FFT round trips per sample
            img = np.real(np.fft.ifft2(np.fft.fft2(img) * 0.99)).astype(np.float32)
        return torch.from_numpy(img.reshape(-1)[:1024].copy()), int(i % 10)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--pin", action="store_true")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    model = nn.Sequential(nn.Linear(1024, 2048), nn.GELU(), nn.Linear(2048, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    dl = DataLoader(Noisy(), batch_size=64, shuffle=False, num_workers=a.workers, pin_memory=a.pin,
                    persistent_workers=a.workers > 0, prefetch_factor=4 if a.workers else None)
    it = iter(dl)
    for _ in range(3):  # warm-up outside the profiler (and the workers' queue fills)
        xb, yb = next(it)
        loss = nn.functional.cross_entropy(model(xb.cuda()), yb.cuda())
        loss.backward(); opt.step(); opt.zero_grad()
    torch.cuda.synchronize()
    time.sleep(1.0 if a.workers else 0.0)  # let the workers fill their prefetch queue
    with profiler(active=3) as prof:
        for step in range(5):
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
