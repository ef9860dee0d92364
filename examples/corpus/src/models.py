"""Small models shared by the corpus workloads."""
import torch.nn as nn


def mlp(d=1024, depth=4, out=10):
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(d, d), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(d, out))


class Blocks(nn.Module):
    """A stack of pre-norm MLP blocks (d -> 4d -> d): enough parameters for optimizer traces."""

    def __init__(self, d=1024, depth=8):
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
            for _ in range(depth))
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        for blk in self.blocks:
            x = x + blk(x)
        return self.head(x)
