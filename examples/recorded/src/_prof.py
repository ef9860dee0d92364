"""Profiler setup shared by the recorded workloads: warm-up outside, schedule(wait=1, warmup=1,
active=N), CPU+CUDA activities, export as <out>.json plus the key_averages table <out>.txt."""
import json, os, sys, torch
from torch.profiler import ProfilerActivity, profile, schedule


def profiler(active=3, record_shapes=True, with_stack=True, profile_memory=False):
    return profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                   schedule=schedule(wait=1, warmup=1, active=active),
                   record_shapes=record_shapes, with_stack=with_stack, profile_memory=profile_memory)


def export(prof, out, **meta):
    torch.cuda.synchronize()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    prof.export_chrome_trace(out + ".json")
    with open(out + ".txt", "w") as f:
        f.write(prof.key_averages().table(sort_by="cuda_time_total", row_limit=20))
    meta.update(torch=torch.__version__, gpu=torch.cuda.get_device_name(), argv=sys.argv)
    with open(out + ".meta.json", "w") as f:
        json.dump(meta, f, indent=1)
    print("wrote", out, flush=True)
