"""torchvision ResNet-18 (random weights) trained in fp32 with SGD (momentum, default foreach):
the same batch-norm and convolution kernels run over layers of different sizes (64..512
channels, 56x56..7x7), so one kernel name covers several problem sizes."""
import argparse, torch, torch.nn as nn, torchvision
from _prof import export, profiler, steps


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--memory", action="store_true")
    p.add_argument("--modules", action="store_true")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=1000).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(a.batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (a.batch,), device="cuda")
    for _ in range(3):
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    torch.cuda.synchronize()
    with profiler(active=3, profile_memory=a.memory, with_modules=a.modules) as prof:
        for _ in range(steps(3)):
            out = model(x)
            loss = nn.functional.cross_entropy(out, y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    export(prof, a.out, batch=a.batch, memory=a.memory, modules=a.modules)


if __name__ == "__main__":
    main()
