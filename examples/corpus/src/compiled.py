"""A torch.compile'd 6-layer bf16 MLP (d 2048, batch 512). --variant break puts a print() after the
third layer (a graph break, no sync: two compiled graphs per step with eager Python between);
--variant sync reads a value with .item() there (a graph break and a device-to-host sync);
--variant none compiles the whole forward into one graph."""
import argparse, torch, torch.nn as nn
from _prof import export, profiler, steps

VARIANT = "none"


class Net(nn.Module):
    def __init__(self, d=2048):
        super().__init__()
        self.l0, self.l1, self.l2 = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.l3, self.l4, self.l5 = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        x = torch.relu(self.l0(x))
        x = torch.relu(self.l1(x))
        x = torch.relu(self.l2(x))
        if VARIANT == "break":
            print("half way through the layers")
        elif VARIANT == "sync":
            if x.mean().item() > 1e9:
                x = x * 0.5
        x = torch.relu(self.l3(x))
        x = torch.relu(self.l4(x))
        return torch.relu(self.l5(x))


def main():
    global VARIANT
    p = argparse.ArgumentParser()
    p.add_argument("--variant", choices=["none", "break", "sync"], default="none")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    VARIANT = a.variant
    torch.manual_seed(0)
    model = Net().cuda().to(torch.bfloat16)
    fn = torch.compile(model)
    x = torch.randn(512, 2048, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        for _ in range(3):  # compile and warm up outside the profiler
            fn(x)
        torch.cuda.synchronize()
        with profiler(active=3) as prof:
            for _ in range(steps(3)):
                y = fn(x)
                prof.step()
    export(prof, a.out, variant=a.variant)


if __name__ == "__main__":
    main()
