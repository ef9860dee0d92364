"""Cold first calls: a fresh process profiles a 1-D convolutional audio encoder from its very
first forward (cuDNN handle and heuristics, lazy module loading, first launch of every kernel),
five training iterations, no warm-up, no steps. fp32 (convolutions in TF32 by default)."""
import sys
import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile


def encoder():
    layers, c = [], 1
    for w in (128, 256, 256, 256, 256, 256):
        layers += [nn.Conv1d(c, w, 9, padding=4), nn.ReLU()]
        c = w
    return nn.Sequential(*layers)


def main(out):
    model = encoder().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    wave = torch.randn(32, 1, 16000, device="cuda")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True,
                 record_shapes=True) as prof:
        for _ in range(5):
            feats = model(wave)
            loss = feats.pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
        torch.cuda.synchronize()
    prof.export_chrome_trace(out)


if __name__ == "__main__":
    main(sys.argv[1])
