"""Training that prefetches the next batch on a side CUDA stream: pinned host batches are copied
on `copy_stream` while the default stream computes the current step, then the default stream
waits on the copy. Overlapped copies, no stall."""
import argparse, torch, torch.nn as nn
from models import mlp
from _prof import export, profiler, steps


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    model = mlp(d=2048, depth=4).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    host = [torch.randn(8192, 2048).pin_memory() for _ in range(4)]
    labels = torch.randint(0, 10, (8192,), device="cuda")
    copy_stream = torch.cuda.Stream()

    def prefetch(i):
        with torch.cuda.stream(copy_stream):
            return host[i % len(host)].to("cuda", non_blocking=True)

    state = {"next": prefetch(0)}

    def step(i):
        torch.cuda.current_stream().wait_stream(copy_stream)
        x = state["next"]
        x.record_stream(torch.cuda.current_stream())
        state["next"] = prefetch(i + 1)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), labels)
        loss.backward()
        opt.step()
        opt.zero_grad()

    for i in range(3):
        step(i)
    torch.cuda.synchronize()
    with profiler(active=3) as prof:
        for i in range(3, 3 + steps(3)):
            step(i)
            prof.step()
    export(prof, a.out)


if __name__ == "__main__":
    main()
