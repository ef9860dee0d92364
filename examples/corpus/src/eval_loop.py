"""An evaluation loop over a small transformer encoder (bf16, batch 32 x 128 tokens):
--variant grad forgets torch.no_grad(), so every forward builds the autograd graph and keeps its
activations; --variant nograd is the fixed twin."""
import argparse, contextlib, torch, torch.nn as nn
from _prof import export, profiler, steps


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--variant", choices=["grad", "nograd"], default="grad")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048, batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=4).cuda().to(torch.bfloat16).eval()
    head = nn.Linear(512, 10).cuda().to(torch.bfloat16)
    batches = [torch.randn(32, 128, 512, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    ctx = torch.no_grad if a.variant == "nograd" else contextlib.nullcontext
    for xb in batches:
        head(model(xb)).argmax(-1)
    torch.cuda.synchronize()
    correct = torch.zeros((), device="cuda")
    with profiler(active=3, profile_memory=True) as prof:
        for step in range(steps(3)):
            with ctx():
                xb = batches[step % len(batches)]
                logits = head(model(xb).mean(dim=1))
                correct += (logits.argmax(-1) == 0).sum()
            prof.step()
    export(prof, a.out, variant=a.variant, correct=int(correct))


if __name__ == "__main__":
    main()
