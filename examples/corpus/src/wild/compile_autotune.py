"""torch.compile(mode="max-autotune-no-cudagraphs") of one bf16 GEMM + bias + ReLU, compiled and
autotuned inside the profiled window (Inductor benchmarks Triton and cuBLAS candidates), then
three calls; no steps."""
import sys
import torch
from torch.profiler import ProfilerActivity, profile


def layer(x, w, b):
    return torch.relu(x @ w + b)


def main(out):
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    fast = torch.compile(layer, mode="max-autotune-no-cudagraphs")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        for _ in range(4):
            y = fast(x, w, b)
        torch.cuda.synchronize()
    print(y.float().mean().item())
    prof.export_chrome_trace(out)


if __name__ == "__main__":
    main(sys.argv[1])
