"""Image models with random weights on a batch already on the GPU. --model convnext_tiny: timm,
bf16 autocast, channels_last, fused AdamW, batch 64 training; --model efficientnet_b0:
torchvision, plain fp32 NCHW (cuDNN may use TF32 for convolutions, PyTorch's default), SGD
momentum (default foreach), batch 64 training; --model mobilenet_v3_small: torchvision, fp32,
batch-1 inference under no_grad (the latency case)."""
import argparse, torch, torch.nn as nn
from _prof import export, profiler, steps, unprofiled_us


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["convnext_tiny", "efficientnet_b0", "mobilenet_v3_small"], required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    if a.model == "convnext_tiny":
        import timm
        model = timm.create_model("convnext_tiny", pretrained=False).to(a.device, memory_format=torch.channels_last)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    else:
        import torchvision
        model = getattr(torchvision.models, a.model)(weights=None).to(a.device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    infer = a.model == "mobilenet_v3_small"
    batch = 1 if infer else a.batch
    x = torch.randn(batch, 3, 224, 224, device=a.device)
    if a.model == "convnext_tiny":
        x = x.to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=a.device)

    def train_step():
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.model == "convnext_tiny"):
            loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def infer_step():
        with torch.no_grad():
            return model(x).argmax(1)

    if infer:
        model.eval()
    step = infer_step if infer else train_step
    for _ in range(3):
        step()
    us = unprofiled_us(step, 10)
    active = 3 if infer else 2
    with profiler(active=active, cuda=a.device == "cuda") as prof:
        for _ in range(steps(active)):
            step()
            prof.step()
    export(prof, a.out, model=a.model, batch=batch, unprofiled_us_per_step=us)


if __name__ == "__main__":
    main()
