"""A step whose memory comes from the helpers a region calls. --variant helpers: a
record_function("features") region calls two helpers, an fp32 upcast of a bf16 batch (64 MB out,
64 MB temporary) and a batched similarity matrix (32 x 1024 x 1024 fp32, 128 MB), so the region's
own statements allocate next to nothing while its helpers allocate ~256 MB a step. --variant
inline: the same work written in the region's own statements, with no helper to point at."""
import argparse, torch
from torch.profiler import record_function
from _prof import export, profiler


def upcast(x):
    return x.float() * 2.0


def pairwise(a):
    return torch.bmm(a, a.transpose(1, 2))


def features_helpers(x):
    with record_function("features"):
        a = upcast(x)
        s = pairwise(a)
        return s.sum(dim=-1) + a.mean(dim=-1)


def features_inline(x):
    with record_function("features"):
        a = x.float() * 2.0
        s = torch.bmm(a, a.transpose(1, 2))
        return s.sum(dim=-1) + a.mean(dim=-1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--variant", choices=["helpers", "inline"], required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    x = torch.randn(32, 1024, 512, device="cuda", dtype=torch.bfloat16)
    fn = features_helpers if a.variant == "helpers" else features_inline
    for _ in range(3):
        fn(x)
    torch.cuda.synchronize()
    with profiler(active=3, profile_memory=True) as prof:
        for _ in range(5):
            out = fn(x)
            prof.step()
    export(prof, a.out, variant=a.variant, checksum=float(out.float().sum()))


if __name__ == "__main__":
    main()
