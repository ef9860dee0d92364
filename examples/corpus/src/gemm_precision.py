"""Large GEMMs (4096 x 4096 x 4096) in three precisions: --kind fp32 (fp32 tensors, TF32 off: CUDA
cores), --kind tf32 (fp32 tensors with torch.backends.cuda.matmul.allow_tf32 = True: tensor
cores), --kind fp8 (torch._scaled_mm on float8_e4m3fn operands with fp32 scales, bf16 out: FP8
tensor cores, fp32 accumulation, kernel names carrying f32)."""
import argparse, torch
from _prof import export, profiler, steps, unprofiled_us


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kind", choices=["fp32", "tf32", "fp8"], required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = a.kind == "tf32"
    n = 4096
    x = torch.randn(n, n, device="cuda")
    w = torch.randn(n, n, device="cuda")
    if a.kind == "fp8":
        xq = x.to(torch.float8_e4m3fn)
        wq = w.to(torch.float8_e4m3fn).t()  # column-major second operand
        one = torch.ones((), device="cuda")
        gemm = lambda: torch._scaled_mm(xq, wq, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    else:
        gemm = lambda: x @ w
    per_iter = unprofiled_us(gemm, iters=20)
    with profiler(active=3) as prof:
        for _ in range(steps(3)):
            y = gemm()
            prof.step()
    export(prof, a.out, kind=a.kind, n=n, unprofiled_us_per_iter=per_iter)


if __name__ == "__main__":
    main()
