"""A 4-layer causal transformer (bf16, batch 8, 12 heads, T 512, d 768) in inference: --impl manual
writes attention by hand (matmul, scale and mask, softmax, matmul, with the B x H x T x T scores
materialised); --impl sdpa calls F.scaled_dot_product_attention (a fused flash kernel)."""
import argparse, math, torch, torch.nn as nn, torch.nn.functional as F
from _prof import export, profiler, steps

IMPL = "manual"


class SelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if IMPL == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
            mask = torch.ones(t, t, device=x.device, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
            probs = torch.softmax(scores, dim=-1)
            y = probs @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = SelfAttention(d, heads)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def main():
    global IMPL
    p = argparse.ArgumentParser()
    p.add_argument("--impl", choices=["manual", "sdpa"], default="manual")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    IMPL = a.impl
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(768, 12) for _ in range(4)]).cuda().to(torch.bfloat16).eval()
    x = torch.randn(8, 512, 768, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        for _ in range(3):
            model(x)
        torch.cuda.synchronize()
        with profiler(active=3) as prof:
            for _ in range(steps(3)):
                y = model(x)
                prof.step()
    export(prof, a.out, impl=a.impl)


if __name__ == "__main__":
    main()
