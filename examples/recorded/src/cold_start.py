"""Profiling from the program's first step, no warm-up, one process alone on the GPU: a bf16-autocast
MLP (d 2048, 4 layers, batch 1024) trained with fused AdamW under a profiler without a schedule,
so steps 1-3 are all recorded. Step 1 pays CUDA's lazy module loading (each kernel's module is
loaded at its first launch), cuBLAS handle and workspace creation; later steps do not."""
import argparse, json, sys, torch, torch.nn as nn
from torch.profiler import ProfilerActivity, profile


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [nn.Linear(2048, 2048), nn.GELU()]
    model = nn.Sequential(*layers, nn.Linear(2048, 16)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randn(1024, 2048, device="cuda")
    y = torch.randint(0, 16, (1024,), device="cuda")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                 with_stack=True) as prof:
        for _ in range(3):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
        torch.cuda.synchronize()
    prof.export_chrome_trace(a.out + ".json")
    with open(a.out + ".txt", "w") as f:
        f.write(prof.key_averages().table(sort_by="cuda_time_total", row_limit=20))
    with open(a.out + ".meta.json", "w") as f:
        json.dump({"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "argv": sys.argv}, f, indent=1)


if __name__ == "__main__":
    main()
