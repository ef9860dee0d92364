"""Greedy decoding with Hugging Face GPT-2 (random weights from a config, bf16, batch 1): the
generate() loop launches a few dozen tiny kernels per token, GEMMs of [1,1,768] x [768,N]."""
import argparse, torch
from transformers import GPT2Config, GPT2LMHeadModel
from _prof import export, profiler, steps


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=a.layers, n_embd=768, n_head=12, vocab_size=32000, n_positions=512)
    model = GPT2LMHeadModel(cfg).to("cuda", torch.bfloat16).eval()
    prompt = torch.randint(0, cfg.vocab_size, (1, 32), device="cuda")
    gen = dict(max_new_tokens=a.tokens, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        model.generate(prompt, **gen)  # warm-up outside the profiler
        torch.cuda.synchronize()
        with profiler(active=2) as prof:
            for _ in range(steps(2)):
                out = model.generate(prompt, **gen)
                prof.step()
    export(prof, a.out, layers=a.layers, tokens=a.tokens, generated=out.shape[1])


if __name__ == "__main__":
    main()
