"""Profiler setup shared by the corpus workloads: schedule(wait=1, warmup=1, active=N), warm-up
outside, CPU (+CUDA) activities, export <out>.json.gz, the key_averages table <out>.txt and the
arguments and versions <out>.meta.json."""
import gzip, json, os, shutil, sys, time
import torch
from torch.profiler import ProfilerActivity, profile, schedule


def profiler(active=3, record_shapes=True, with_stack=True, profile_memory=False, with_modules=False,
             cuda=True, wait=1, warmup=1):
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    return profile(activities=acts, schedule=schedule(wait=wait, warmup=warmup, active=active),
                   record_shapes=record_shapes, with_stack=with_stack, profile_memory=profile_memory,
                   with_modules=with_modules)


def steps(active=3, wait=1, warmup=1):
    return wait + warmup + active


def export(prof, out, **meta):
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    prof.export_chrome_trace(out + ".json")
    with open(out + ".json", "rb") as src, gzip.open(out + ".json.gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    os.remove(out + ".json")
    sort = "cuda_time_total" if torch.cuda.is_available() and meta.get("cuda", True) else "cpu_time_total"
    with open(out + ".txt", "w") as f:
        f.write(prof.key_averages().table(sort_by=sort, row_limit=20))
    meta.update(torch=torch.__version__, argv=sys.argv, cwd=os.getcwd(), python=sys.version.split()[0],
                gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else None,
                recorded_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    with open(out + ".meta.json", "w") as f:
        json.dump(meta, f, indent=1, default=str)
    print("wrote", out, os.path.getsize(out + ".json.gz"), "bytes", flush=True)


def unprofiled_us(fn, iters=10):
    """Mean microseconds per call of fn outside the profiler (CUDA synchronised)."""
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return (time.perf_counter() - t) / iters * 1e6
