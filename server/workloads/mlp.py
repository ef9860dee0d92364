"""A multi-op workload: a small MLP (Linear -> GELU -> LayerNorm, repeated) served at a small batch,
eager, ``torch.compile``d (fuses the elementwise ops), or compiled with CUDA graphs
(``mode="reduce-overhead"``: one graph launch per call). Contrasts with matmul-bias, where compile
has nothing to fuse and only adds its wrapper."""
from __future__ import annotations

import argparse
import sys

import _common as C


def build(torch, width: int, depth: int):
    nn = torch.nn
    return nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(width, width), nn.GELU(), nn.LayerNorm(width))])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--mode", choices=["eager", "compile", "graphs"], default="eager")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    C.common_args(p)
    a = p.parse_args(argv)
    torch = C.import_torch()
    dev = C.pick_device(torch, a.device)
    if a.mode == "graphs" and dev != "cuda":
        C.fail(C.EXIT_USAGE, "--mode graphs needs a CUDA GPU")

    def run():
        torch.manual_seed(0)
        dt = getattr(torch, a.dtype)
        net = build(torch, a.width, a.depth).to(device=dev, dtype=dt).eval()
        fn = {"eager": lambda: net, "compile": lambda: torch.compile(net),
              "graphs": lambda: torch.compile(net, mode="reduce-overhead")}[a.mode]()
        x = torch.randn(a.batch, a.width, device=dev, dtype=dt)
        out = {}

        def step():
            with torch.no_grad():
                out["y"] = fn(x)

        meta = {"workload": "mlp", "mode": a.mode, "batch": a.batch, "width": a.width, "depth": a.depth,
                "dtype": a.dtype, "compile": a.mode != "eager"}
        C.profile_loop(torch, dev, a, "mlp_forward", step, meta)

    C.guarded(torch, run)


if __name__ == "__main__":
    main(sys.argv[1:])
