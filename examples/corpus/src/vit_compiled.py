"""timm ViT-Tiny (random weights) trained under torch.compile (the whole model, default mode),
bf16 autocast, fused AdamW, batch 64 already on the GPU: one compiled forward graph and its
compiled backward per step, attention through F.scaled_dot_product_attention."""
import argparse, torch, torch.nn as nn, timm
from _prof import export, profiler, steps, unprofiled_us


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False).to(a.device)
    cmodel = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randn(a.batch, 3, 224, 224, device=a.device)
    y = torch.randint(0, 1000, (a.batch,), device=a.device)

    def step():
        with torch.autocast(a.device, dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(cmodel(x), y)
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
    export(prof, a.out, batch=a.batch, unprofiled_us_per_step=us)


if __name__ == "__main__":
    main()
