"""The legacy API: `torch.autograd.profiler.profile(use_device="cuda")` around ten training
iterations of a wide fp32 MLP (batch 4096, d 2048), warmed up first. fp32 GEMMs with TF32 off
(PyTorch's default matmul precision), so they run on CUDA cores."""
import sys
import torch
import torch.nn as nn


def train_step(model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()


def main(out):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2048, 2048), nn.GELU(), nn.Linear(2048, 2048), nn.GELU(),
                          nn.Linear(2048, 2048)).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(4096, 2048, device="cuda")
    y = torch.randn(4096, 2048, device="cuda")
    for _ in range(3):
        train_step(model, opt, x, y)
    torch.cuda.synchronize()
    with torch.autograd.profiler.profile(use_device="cuda", record_shapes=True, with_stack=True) as prof:
        for _ in range(10):
            train_step(model, opt, x, y)
        torch.cuda.synchronize()
    prof.export_chrome_trace(out)


if __name__ == "__main__":
    main(sys.argv[1])
