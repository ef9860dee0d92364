"""One training step with four planted problems, each fixed on its own, for the impact check
(bench/impact.py: what a fix really gives back, against what profd predicts for it).

The problems: fp32 GEMMs with TF32 off (CUDA cores), AdamW(foreach=False) (one kernel per
parameter per op), zero_grad(set_to_none=False) (a fill per gradient), and the batch copied from
pageable memory. --fix tf32 | bf16 | foreach | zero | pinned | none, or several joined by '+'
(foreach+tf32). --size gpu: d 2048, 4 blocks, 2048 tokens (the fp32 GEMMs bound the step);
--size cpu: d 512, 16 blocks, 2048 tokens (the single-tensor optimizer's dispatch bounds it).
The unprofiled µs per step (after warm-up, 3 repeats of 10 steps, synchronised) go to the meta.
"""
import argparse, statistics, torch, torch.nn as nn
from models import Blocks
from _prof import export, profiler, steps, unprofiled_us

SIZES = {"gpu": dict(d=2048, depth=4, tokens=2048), "cpu": dict(d=512, depth=16, tokens=2048),
         "tiny": dict(d=64, depth=2, tokens=64)}  # tiny: a smoke test of the script on a CPU
FIXES = {"tf32", "bf16", "foreach", "zero", "pinned"}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--size", choices=sorted(SIZES), required=True)
    p.add_argument("--fix", default="none")
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    fix = set(a.fix.split("+")) - {"none"}
    assert fix <= FIXES, f"unknown fix {fix - FIXES}"
    dev, cfg = a.device, SIZES[a.size]
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = "tf32" in fix
    model = Blocks(d=cfg["d"], depth=cfg["depth"]).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach="foreach" in fix)
    pinned = "pinned" in fix and dev == "cuda"
    host = [torch.randn(cfg["tokens"], cfg["d"]) for _ in range(2)]
    if pinned:
        host = [h.pin_memory() for h in host]
    labels = torch.randint(0, 10, (cfg["tokens"],), device=dev)
    it = [0]

    def step():
        it[0] += 1
        x = host[it[0] % 2].to(dev, non_blocking=pinned)
        with torch.autocast(dev, dtype=torch.bfloat16, enabled="bf16" in fix):
            loss = nn.functional.cross_entropy(model(x), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none="zero" in fix)

    for _ in range(3):
        step()
    runs = [unprofiled_us(step, 10) for _ in range(3)]
    with profiler(active=3, cuda=dev == "cuda") as prof:
        for _ in range(steps(3)):
            step()
            prof.step()
    export(prof, a.out, size=a.size, fix=sorted(fix), unprofiled_us_per_step=statistics.median(runs),
           unprofiled_runs_us=runs, params=len(list(model.parameters())), **cfg)


if __name__ == "__main__":
    main()
