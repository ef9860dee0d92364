"""A DLRM-style recommender: 8 nn.EmbeddingBag tables (100k x 64, sum of 16 ids per sample),
a bottom MLP over 13 dense features and a top MLP over the concatenation, BCE loss, Adagrad
(default foreach; dense gradients), batch 4096. Every step draws its sparse ids and dense features
on the CPU and copies them with a plain .to("cuda") from pageable memory (4.2 MB of int64 ids,
208 KB of features)."""
import argparse, torch, torch.nn as nn
from _prof import export, profiler, steps, unprofiled_us

TABLES, ROWS, DIM, BAG, DENSE = 8, 100_000, 64, 16, 13


class DLRM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tables = nn.ModuleList(nn.EmbeddingBag(ROWS, DIM, mode="sum") for _ in range(TABLES))
        self.bottom = nn.Sequential(nn.Linear(DENSE, 256), nn.ReLU(), nn.Linear(256, DIM), nn.ReLU())
        self.top = nn.Sequential(nn.Linear(DIM * (TABLES + 1), 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                                 nn.Linear(256, 1))

    def forward(self, dense, ids, offsets):
        feats = [self.bottom(dense)] + [t(ids[i], offsets) for i, t in enumerate(self.tables)]
        return self.top(torch.cat(feats, 1)).squeeze(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    B = a.batch
    model = DLRM().to(a.device)
    opt = torch.optim.Adagrad(model.parameters(), lr=0.01)
    offsets = torch.arange(0, B * BAG, BAG, device=a.device)

    def step():
        ids = torch.randint(0, ROWS, (TABLES, B * BAG)).to(a.device)
        dense = torch.randn(B, DENSE).to(a.device)
        click = torch.randint(0, 2, (B,), device=a.device).float()
        loss = nn.functional.binary_cross_entropy_with_logits(model(dense, ids, offsets), click)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    us = unprofiled_us(step, 5)
    with profiler(active=3, cuda=a.device == "cuda") as prof:
        for _ in range(steps(3)):
            step()
            prof.step()
    export(prof, a.out, batch=B, tables=TABLES, rows=ROWS, dim=DIM, bag=BAG, unprofiled_us_per_step=us)


if __name__ == "__main__":
    main()
