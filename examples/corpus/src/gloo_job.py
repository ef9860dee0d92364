"""A 2-rank CPU data-parallel job on one machine over the gloo backend: DDP around a 4-layer MLP
(d 2048, 16.8 M parameters, 67 MB of gradients) at batch 32, so the gloo all-reduce of the
gradients takes most of each step. --straggler makes rank 1 sleep 40 ms per step (a slow data
path, say): rank 0 then waits for it in every all-reduce. One trace per rank."""
import argparse, os, time, torch, torch.distributed as dist, torch.multiprocessing as mp, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from models import mlp
from _prof import export, profiler, steps


def worker(rank, world, a):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(a.port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(4)
    torch.manual_seed(0)
    model = DDP(mlp(d=2048, depth=4))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(32, 2048)
    y = torch.randint(0, 10, (32,))

    def step():
        if a.straggler and rank == 1:
            time.sleep(0.04)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()

    for _ in range(3):
        step()
    dist.barrier()
    with profiler(active=3, cuda=False) as prof:
        for _ in range(steps(3)):
            step()
            prof.step()
    export(prof, f"{a.out}_rank{rank}", cuda=False, rank=rank, world=world, straggler=a.straggler)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--straggler", action="store_true")
    p.add_argument("--port", type=int, default=29511)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    mp.spawn(worker, args=(2, a), nprocs=2, join=True)


if __name__ == "__main__":
    main()
