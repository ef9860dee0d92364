"""Hugging Face GPT-2 (random weights, 4 layers, d 768) trained with bf16 autocast and AdamW
(default foreach) on batches already on the GPU; --mode scaler trains with fp16 autocast and
torch.amp.GradScaler instead; --mode infer runs the forward alone under no_grad. Recorded with
with_modules=True for the module view."""
import argparse, torch
from transformers import GPT2Config, GPT2LMHeadModel
from _prof import export, profiler, steps


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["train", "scaler", "infer"], default="train")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=a.layers, n_embd=768, n_head=12, vocab_size=32000, n_positions=a.seq)
    model = GPT2LMHeadModel(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, cfg.vocab_size, (a.batch, a.seq), device="cuda")

    def train_step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    scaler = torch.amp.GradScaler("cuda")

    def scaler_step():
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(input_ids=ids, labels=ids).loss
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    def infer_step():
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            return model(input_ids=ids).logits

    if a.mode == "infer":
        model.eval()
    step = {"train": train_step, "scaler": scaler_step, "infer": infer_step}[a.mode]
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profiler(active=3, with_modules=True) as prof:
        for _ in range(steps(3)):
            step()
            prof.step()
    export(prof, a.out, mode=a.mode, layers=a.layers, batch=a.batch, seq=a.seq)


if __name__ == "__main__":
    main()
