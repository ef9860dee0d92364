"""A data-loading-heavy epoch: a DataLoader with 2 worker processes whose __getitem__ augments a
synthetic 3x128x128 image with numpy (~2 ms a sample, 64 samples a batch) feeds a small CNN; one
`with profile()` around the whole epoch (24 batches), no steps. The GPU needs ~1 ms a batch, the
workers ~60 ms: the loop waits on the loader."""
import sys
import numpy as np
import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile
from torch.utils.data import DataLoader, Dataset


class Augmented(Dataset):
    def __len__(self):
        return 64 * 24

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        img = rng.random((128, 128, 3), dtype=np.float32)
        for _ in range(4):
            noise = rng.normal(0, 0.05, img.shape).astype(np.float32)
            img = np.clip(img * np.float32(rng.uniform(0.8, 1.2)) + noise, 0, 1)
        img = (img - img.mean()) / (img.std() + 1e-6)
        return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1))), i % 10


def main(out):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Augmented(), batch_size=64, num_workers=2)
    model(torch.randn(64, 3, 128, 128, device="cuda")).sum().backward()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True,
                 record_shapes=True) as prof:
        for x, y in loader:
            x, y = x.cuda(), y.cuda()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
        torch.cuda.synchronize()
    prof.export_chrome_trace(out)


if __name__ == "__main__":
    main(sys.argv[1])
