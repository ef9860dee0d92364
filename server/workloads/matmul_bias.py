"""The seed's workload: ``y = x @ w + b`` on n x n matrices, eager or compiled, under the profiler."""
from __future__ import annotations

import argparse
import sys

import _common as C

DTYPES = ("float32", "tf32", "bfloat16", "float16")


def matmul_bias(x, w, b):
    return x @ w + b


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--dtype", choices=DTYPES, default="bfloat16")
    p.add_argument("--compile", action="store_true")
    C.common_args(p)
    a = p.parse_args(argv)
    if not 1 <= a.n <= 16384 or not 1 <= a.active <= 100:
        C.fail(C.EXIT_USAGE, "--n must be in 1..16384 and --active in 1..100")
    torch = C.import_torch()
    dev = C.pick_device(torch, a.device)

    def run():
        # tf32 is float32 storage with TF32 tensor-core math; float32 pins full precision
        torch.backends.cuda.matmul.allow_tf32 = a.dtype == "tf32"
        torch.set_float32_matmul_precision("high" if a.dtype == "tf32" else "highest")
        dt = torch.float32 if a.dtype in ("float32", "tf32") else getattr(torch, a.dtype)
        C.progress(f"allocating {a.n}x{a.n} {a.dtype} on {dev}", 5)
        g = torch.Generator(device=dev).manual_seed(0)
        x = torch.randn(a.n, a.n, device=dev, dtype=dt, generator=g)
        w = torch.randn(a.n, a.n, device=dev, dtype=dt, generator=g)
        b = torch.randn(a.n, device=dev, dtype=dt, generator=g)
        fn = torch.compile(matmul_bias) if a.compile else matmul_bias
        if a.compile:
            C.progress("compiling (torch.compile, first call)", 8)
        out = {}

        def step():
            out["y"] = fn(x, w, b)

        meta = {"workload": "matmul-bias", "n": a.n, "dtype": a.dtype, "compile": a.compile,
                "flop_per_iter": 2 * a.n ** 3 + a.n * a.n}
        C.profile_loop(torch, dev, a, "matmul_bias", step, meta)

    C.guarded(torch, run)


if __name__ == "__main__":
    main(sys.argv[1:])
