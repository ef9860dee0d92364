"""An evaluation loop. --variant grow: no torch.no_grad() and the loss summed as a tensor
(`total = total + loss`, line 35): every step's autograd graph, with the activations it saved,
stays alive through `total`, so allocated memory rises step over step. --variant fixed: the same
loop summing `loss.detach()` (twin): the activations are freed each step."""
import argparse, torch
from torch import nn
from _prof import export, profiler


def make_model(d):
    return nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d), nn.GELU(),
                         nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)).cuda()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--variant", choices=["grow", "fixed"], default="grow")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    model = make_model(1024)
    model.eval()
    batches = [(torch.randn(512, 1024, device="cuda"), torch.randn(512, 1024, device="cuda")) for _ in range(16)]
    grow = a.variant == "grow"
    total = torch.zeros((), device="cuda")
    for xb, yb in batches[:3]:
        model(xb)
    torch.cuda.synchronize()
    with profiler(active=8, profile_memory=True) as prof:
        for k in range(10):
            xb, yb = batches[k]
            out = model(xb)
            loss = nn.functional.mse_loss(out, yb)
            if grow:
                total = total + loss
            else:
                total = total + loss.detach()
            prof.step()
    print("mean loss", (total / 10).item())
    export(prof, a.out, variant=a.variant)


if __name__ == "__main__":
    main()
