"""Greedy decoding with a KV cache, hand-written: a 2-layer bf16 decoder (d 512, 8 heads, vocab
32000, attention through F.scaled_dot_product_attention, the cache grown with torch.cat), batch 1,
a 32-token prompt and 12 new tokens per profiled step, stopping early when the token read back
with .item() is the end-of-sequence id (one device->host sync per token)."""
import argparse, torch, torch.nn as nn, torch.nn.functional as F
from _prof import export, profiler, steps, unprofiled_us

EOS = 0


class Layer(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x, cache):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.heads, D // self.heads).transpose(1, 3).unbind(2)
        if cache is not None:
            k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)))), (k, v)


class Decoder(nn.Module):
    def __init__(self, vocab=32000, d=512, heads=8, depth=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(1024, d)
        self.layers = nn.ModuleList(Layer(d, heads) for _ in range(depth))
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids, start, caches):
        x = self.emb(ids) + self.pos(torch.arange(start, start + ids.size(1), device=ids.device))
        new = []
        for layer, cache in zip(self.layers, caches):
            x, kv = layer(x, cache)
            new.append(kv)
        return self.head(x[:, -1]), new


@torch.no_grad()
def generate(model, prompt, new_tokens):
    logits, caches = model(prompt, 0, [None] * len(model.layers))
    out = [prompt]
    for i in range(new_tokens):
        nxt = logits.argmax(-1, keepdim=True)
        out.append(nxt)
        if nxt.item() == EOS:
            break
        logits, caches = model(nxt, prompt.size(1) + i, caches)
    return torch.cat(out, 1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--new", type=int, default=12)
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    model = Decoder().to(a.device, torch.bfloat16).eval()
    prompt = torch.randint(1, 32000, (1, 32), device=a.device)

    def step():
        return generate(model, prompt, a.new)

    for _ in range(3):
        step()
    us = unprofiled_us(step, 5)
    with profiler(active=2, cuda=a.device == "cuda") as prof:
        for _ in range(steps(2)):
            step()
            prof.step()
    export(prof, a.out, new_tokens=a.new, unprofiled_us_per_step=us)


if __name__ == "__main__":
    main()
