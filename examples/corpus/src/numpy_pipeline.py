"""A hand-rolled input pipeline, no DataLoader: a Python generator that builds each batch with
numpy on the main thread (64 random uint8 96x96 crops of a 128x128 image, flips, normalisation to
float32) and hands it over with torch.from_numpy(...).to("cuda") from pageable memory, feeding a
torchvision ResNet-18 trained under bf16 autocast with fused AdamW. The GPU waits while numpy
works."""
import argparse, numpy as np, torch, torch.nn as nn
from _prof import export, profiler, steps, unprofiled_us


def batches(batch=64, size=96, seed=0):
    rng = np.random.default_rng(seed)
    mean = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
    while True:
        imgs = rng.integers(0, 256, (batch, 3, 128, 128), dtype=np.uint8)
        ys, xs = rng.integers(0, 128 - size, 2)
        crop = imgs[:, :, ys:ys + size, xs:xs + size].astype(np.float32) / 255.0
        flip = rng.random(batch) < 0.5
        crop[flip] = crop[flip, :, :, ::-1]
        x = np.ascontiguousarray((crop - mean) / 0.226)
        yield x, rng.integers(0, 1000, batch)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).to(a.device, memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    data = batches()

    def step():
        x, y = next(data)
        x = torch.from_numpy(x).to(a.device)
        y = torch.from_numpy(y).to(a.device)
        with torch.autocast(a.device, dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x.contiguous(memory_format=torch.channels_last)), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    us = unprofiled_us(step, 5)
    with profiler(active=3, cuda=a.device == "cuda") as prof:
        for _ in range(steps(3)):
            step()
            prof.step()
    export(prof, a.out, unprofiled_us_per_step=us)


if __name__ == "__main__":
    main()
