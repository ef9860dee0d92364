"""A GPT-style decoder (8 identical blocks, SDPA attention) trained under bf16 autocast.
--odd K keeps block K's MLP in fp32 (autocast off, its input cast up), as one does "for stability":
that block runs fp32 GEMMs where its seven peers run bf16 ones. --odd -1 is the twin with none."""
import argparse, torch, torch.nn as nn, torch.nn.functional as F
from _prof import export, profiler


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).transpose(1, 3).unbind(2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    def __init__(self, d, fp32=False):
        super().__init__()
        self.fp32 = fp32
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        if self.fp32:
            with torch.autocast("cuda", enabled=False):
                return self.out(F.gelu(self.fc(x.float())))
        return self.out(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, d, heads, fp32=False):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = MLP(d, fp32)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, odd, vocab=8192, d=1024, heads=16, layers=8, ctx=512):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads, fp32=(i == odd)) for i in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--odd", type=int, default=5)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    model = GPT(a.odd).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    idx = torch.randint(0, 8192, (8, 512), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(idx)
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), idx.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):  # warm-up outside the profiler
        step()
    torch.cuda.synchronize()
    with profiler(active=3) as prof:
        for _ in range(5):
            step()
            prof.step()
    export(prof, a.out, odd=a.odd)


if __name__ == "__main__":
    main()
