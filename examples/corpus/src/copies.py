"""Host-to-device input copies of 16 MB per step feeding a bf16 MLP: --variant pageable copies
from ordinary (pageable) memory with non_blocking=True, which cannot be asynchronous and stalls
the CPU; --variant pinned copies the same batches from pinned memory (really asynchronous)."""
import argparse, torch, torch.nn as nn
from models import mlp
from _prof import export, profiler, steps


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--variant", choices=["pageable", "pinned"], default="pageable")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    model = mlp(d=1024, depth=4).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    host = [torch.randn(4096, 1024) for _ in range(4)]
    if a.variant == "pinned":
        host = [h.pin_memory() for h in host]
    labels = torch.randint(0, 10, (4096,), device="cuda")

    def step(i):
        x = host[i % len(host)].to("cuda", non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), labels)
        loss.backward()
        opt.step()
        opt.zero_grad()

    for i in range(3):
        step(i)
    torch.cuda.synchronize()
    with profiler(active=3) as prof:
        for i in range(steps(3)):
            step(i)
            prof.step()
    export(prof, a.out, variant=a.variant)


if __name__ == "__main__":
    main()
