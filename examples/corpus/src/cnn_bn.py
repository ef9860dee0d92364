"""A VGG-style convnet of 8 conv -> BatchNorm -> ReLU blocks (64..256 channels) on 64x64 images,
batch 128, bf16 autocast, channels_last, SGD momentum. --bias on: every convolution has a bias
that the BatchNorm after it subtracts right away (wasted work and memory traffic); --bias off:
bias=False, as it should be."""
import argparse, torch, torch.nn as nn, torch.nn.functional as F
from _prof import export, profiler, steps, unprofiled_us


class Net(nn.Module):
    def __init__(self, bias):
        super().__init__()
        chans = [3, 64, 64, 128, 128, 256, 256, 256, 256]
        self.convs = nn.ModuleList(nn.Conv2d(i, o, 3, padding=1, bias=bias) for i, o in zip(chans, chans[1:]))
        self.bns = nn.ModuleList(nn.BatchNorm2d(o) for o in chans[1:])
        self.fc = nn.Linear(256, 100)

    def forward(self, x):
        for i, (conv, bn) in enumerate(zip(self.convs, self.bns)):
            x = F.relu(bn(conv(x)))
            if i % 2 == 1:
                x = F.max_pool2d(x, 2)
        return self.fc(x.mean((2, 3)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bias", choices=["on", "off"], required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    model = Net(a.bias == "on").to(a.device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(128, 3, 64, 64, device=a.device).to(memory_format=torch.channels_last)
    y = torch.randint(0, 100, (128,), device=a.device)

    def step():
        with torch.autocast(a.device, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
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
    export(prof, a.out, bias=a.bias, unprofiled_us_per_step=us)


if __name__ == "__main__":
    main()
