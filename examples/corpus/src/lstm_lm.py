"""An LSTM language model (vocab 10000, embedding 512, hidden 1024/512), batch 32 x 64/32 tokens,
trained with Adam (default foreach). --impl cudnn: nn.LSTM over the whole sequence (cuDNN), plain
fp32 (the decoder nn.Linear's GEMM without TF32, on CUDA cores); --impl cell: an nn.LSTMCell called
in a Python loop over 32 time steps under bf16 autocast (a few tiny kernels per time step)."""
import argparse, torch, torch.nn as nn
from _prof import export, profiler, steps, unprofiled_us


class CudnnLM(nn.Module):
    def __init__(self, vocab=10000, emb=512, hidden=1024):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.rnn = nn.LSTM(emb, hidden, num_layers=2, batch_first=True)
        self.dec = nn.Linear(hidden, vocab)

    def forward(self, ids):
        h, _ = self.rnn(self.emb(ids))
        return self.dec(h)


class CellLM(nn.Module):
    def __init__(self, vocab=10000, emb=512, hidden=512):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.cell = nn.LSTMCell(emb, hidden)
        self.dec = nn.Linear(hidden, vocab)

    def forward(self, ids):
        x = self.emb(ids)
        h = x.new_zeros(x.size(0), self.cell.hidden_size)
        c = torch.zeros_like(h)
        outs = []
        for t in range(x.size(1)):
            h, c = self.cell(x[:, t], (h, c))
            outs.append(h)
        return self.dec(torch.stack(outs, 1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--impl", choices=["cudnn", "cell"], required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    model = (CudnnLM() if a.impl == "cudnn" else CellLM()).to(a.device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 10000, (32, (64 if a.impl == "cudnn" else 32) + 1), device=a.device)
    x, y = ids[:, :-1], ids[:, 1:]

    def step():
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.impl == "cell"):
            logits = model(x)
        loss = nn.functional.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    us = unprofiled_us(step, 5)
    active = 3 if a.impl == "cudnn" else 2
    with profiler(active=active, cuda=a.device == "cuda") as prof:
        for _ in range(steps(active)):
            step()
            prof.step()
    export(prof, a.out, impl=a.impl, unprofiled_us_per_step=us)


if __name__ == "__main__":
    main()
