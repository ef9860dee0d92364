"""A validation loop that keeps a running loss without torch.no_grad(): --variant tensor sums the
loss tensors themselves (`total = total + loss`), so every step's autograd graph, and the
activations its forward saved, stay referenced and allocated memory rises step over step (128 MB
a step here); --variant item sums loss.item() floats and memory stays flat."""
import argparse, torch, torch.nn as nn
from models import mlp
from _prof import export, profiler, steps


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--variant", choices=["tensor", "item"], default="tensor")
    p.add_argument("--active", type=int, default=5)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    model = mlp(d=2048, depth=4).cuda()
    batches = [(torch.randn(2048, 2048, device="cuda"), torch.randint(0, 10, (2048,), device="cuda"))
               for _ in range(2)]
    total = torch.zeros((), device="cuda") if a.variant == "tensor" else 0.0
    for xb, yb in batches:
        nn.functional.cross_entropy(model(xb), yb).item()
    torch.cuda.synchronize()
    with profiler(active=a.active, profile_memory=True) as prof:
        for step in range(steps(a.active)):
            xb, yb = batches[step % len(batches)]
            loss = nn.functional.cross_entropy(model(xb), yb)
            if a.variant == "tensor":
                total = total + loss
            else:
                total += loss.item()
            prof.step()
    export(prof, a.out, variant=a.variant, total=float(total),
           max_allocated=torch.cuda.max_memory_allocated())


if __name__ == "__main__":
    main()
