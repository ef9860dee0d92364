"""Causal self-attention, bf16, B=8 H=16 T=1024 D=64, forward+backward. --variant naive: written
out as q @ k^T, scale, causal mask, softmax, @ v (nanoGPT's slow path, lines 30-33), which
materialises the 8x16x1024x1024 scores; --variant sdpa: F.scaled_dot_product_attention (twin),
which runs one fused flash-attention kernel."""
import argparse, math, torch
import torch.nn.functional as F
from torch import nn
from _prof import export, profiler


class Attention(nn.Module):
    def __init__(self, d, h, t, naive):
        super().__init__()
        self.h, self.naive = h, naive
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.register_buffer("mask", torch.tril(torch.ones(t, t, dtype=torch.bool)).view(1, 1, t, t))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.h, C // self.h).transpose(1, 2)
        k = k.view(B, T, self.h, C // self.h).transpose(1, 2)
        v = v.view(B, T, self.h, C // self.h).transpose(1, 2)
        if not self.naive:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            # (blank lines keep the naive lines at 30-33 in the source the frames point at)

            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--variant", choices=["naive", "sdpa"], default="naive")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    model = Attention(1024, 16, 1024, a.variant == "naive").cuda().to(torch.bfloat16)
    x = torch.randn(8, 1024, 1024, device="cuda", dtype=torch.bfloat16)

    def step():
        y = model(x)
        y.float().pow(2).mean().backward()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profiler(active=3) as prof:
        for _ in range(5):
            step()
            prof.step()
    export(prof, a.out, variant=a.variant)


if __name__ == "__main__":
    main()
