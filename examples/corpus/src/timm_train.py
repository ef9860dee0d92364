"""A timm model (random weights, no download) trained with bf16 autocast and fused AdamW on a
batch already on the GPU: --model vit_small_patch16_224 (attention through
F.scaled_dot_product_attention) or resnet50 (channels_last convolutions)."""
import argparse, torch, torch.nn as nn, timm
from _prof import export, profiler, steps


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="vit_small_patch16_224")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    model = timm.create_model(a.model, pretrained=False, num_classes=1000).cuda()
    if "resnet" in a.model:
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randn(a.batch, 3, 224, 224, device="cuda")
    if "resnet" in a.model:
        x = x.to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (a.batch,), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profiler(active=3) as prof:
        for _ in range(steps(3)):
            step()
            prof.step()
    export(prof, a.out, model=a.model, batch=a.batch, timm=timm.__version__)


if __name__ == "__main__":
    main()
