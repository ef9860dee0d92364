"""One `with profile()` around a whole training epoch, from the first batch on (no warm-up, no
schedule, no prof.step()): an MLP classifier fed by a DataLoader over a TensorDataset, with the
running loss accumulated by `loss.item()` every batch."""
import sys
import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile
from torch.utils.data import DataLoader, TensorDataset


def main(out):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64 * 40, 512), torch.randint(0, 10, (64 * 40,)))
    loader = DataLoader(data, batch_size=64, shuffle=True)
    model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    crit = nn.CrossEntropyLoss()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True,
                 record_shapes=True) as prof:
        running = 0.0
        for x, y in loader:
            x, y = x.cuda(), y.cuda()
            opt.zero_grad()
            loss = crit(model(x), y)
            loss.backward()
            opt.step()
            running += loss.item()
        print("epoch loss", running / len(loader))
    prof.export_chrome_trace(out)


if __name__ == "__main__":
    main(sys.argv[1])
