"""A loop with device->host syncs planted on separate lines (--variant all) and its clean twin
(--variant none): `if t.sum() > 0` (aten::is_nonzero), torch.nonzero, .cpu(), .tolist(), print(t),
.item()."""
import argparse, torch
from _prof import export, profiler


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--variant", choices=["all", "none"], default="all")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    w = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    total = torch.zeros((), device="cuda")
    sync = a.variant == "all"
    for _ in range(3):
        y = x @ w
    torch.cuda.synchronize()
    with profiler(active=3) as prof:
        for _ in range(5):
            y = torch.tanh(x @ w)
            y = torch.tanh(y @ w)
            s = y.float().sum()
            total = total + s
            if sync:
                if s > 0:
                    y = y * 0.5
                idx = torch.nonzero(y[0] > 0)
                row = y[0, :8].cpu()
                vals = y[1, :4].tolist()
                print(y[2, :2])
                loss = s.item()
            prof.step()
    export(prof, a.out, variant=a.variant)


if __name__ == "__main__":
    main()
