"""Two-GPU DDP training with NCCL, one trace per rank (with_stack, distributedInfo set).
--mode straggler: rank 1 gets twice the batch and a 20 ms host stall in its step (planted straggler);
--mode overlap: equal batches, 4 MB buckets, so each bucket's all-reduce runs under the backward of
the layers before it (communication overlapped with computation)."""
import argparse, os, time, torch, torch.distributed as dist, torch.multiprocessing as mp, torch.nn as nn
from torch.profiler import ProfilerActivity, profile, schedule


def build():
    layers = []
    for _ in range(4):
        layers += [nn.Linear(2048, 8192), nn.GELU(), nn.Linear(8192, 2048)]
    return nn.Sequential(*layers).cuda()


def run(rank, world, mode, out, batch=1024):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29543", NCCL_NVLS_ENABLE="0",
                      TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    torch.manual_seed(0)
    net = nn.parallel.DistributedDataParallel(build(), device_ids=[rank],
                                              bucket_cap_mb=4 if mode == "overlap" else 25)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4, fused=True)
    slow = mode == "straggler" and rank == 1
    bs = batch * (2 if slow else 1)
    x = torch.randn(bs, 2048, device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = net(x).float().pow(2).mean()
        if slow:
            time.sleep(0.02)  # planted: host-side stall on rank 1 only
        loss.backward()
        opt.step()
        opt.zero_grad()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 schedule=schedule(wait=1, warmup=1, active=3), with_stack=True, record_shapes=True) as prof:
        for _ in range(5):
            step()
            prof.step()
    torch.cuda.synchronize()
    prof.export_chrome_trace(f"{out}_rank{rank}.json")
    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["straggler", "overlap"], default="straggler")
    p.add_argument("--out", required=True)
    p.add_argument("--batch", type=int, default=1024, help="per-rank batch (rank 1 doubles it as straggler)")
    a = p.parse_args()
    mp.spawn(run, args=(2, a.mode, a.out, a.batch), nprocs=2)
