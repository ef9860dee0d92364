"""Hugging Face GPT-2 inference (random weights, 4 layers, bf16, batch 8 x 128) through
torch.compile(model): the whole forward in compiled graphs, no_grad."""
import argparse, torch
from transformers import GPT2Config, GPT2LMHeadModel
from _prof import export, profiler, steps


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=4, n_embd=768, n_head=12, vocab_size=32000, n_positions=512)
    model = GPT2LMHeadModel(cfg).to("cuda", torch.bfloat16).eval()
    fn = torch.compile(model)
    ids = torch.randint(0, cfg.vocab_size, (8, 128), device="cuda")
    with torch.no_grad():
        for _ in range(3):
            fn(input_ids=ids)
        torch.cuda.synchronize()
        with profiler(active=3) as prof:
            for _ in range(steps(3)):
                logits = fn(input_ids=ids).logits
                prof.step()
    export(prof, a.out)


if __name__ == "__main__":
    main()
