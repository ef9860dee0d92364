"""Hugging Face T5 (random weights, 2 encoder + 2 decoder layers, d 512, 8 heads, vocab 32128)
loaded with attn_implementation="eager" (what users set to get attention maps back, and what
older releases ran), trained under bf16 autocast with AdamW (default foreach) on batches already
on the GPU: the library's attention is written out (q @ k^T + position bias, softmax, @ v) with
the B x H x T x T scores materialised, not F.scaled_dot_product_attention."""
import argparse, torch
from transformers import T5Config, T5ForConditionalGeneration
from _prof import export, profiler, steps, unprofiled_us


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--src", type=int, default=256)
    p.add_argument("--tgt", type=int, default=64)
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    cfg = T5Config(d_model=512, d_ff=2048, d_kv=64, num_layers=2, num_decoder_layers=2, num_heads=8,
                   vocab_size=32128, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0)
    model = T5ForConditionalGeneration._from_config(cfg, attn_implementation="eager").to(a.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    src = torch.randint(0, cfg.vocab_size, (a.batch, a.src), device=a.device)
    tgt = torch.randint(0, cfg.vocab_size, (a.batch, a.tgt), device=a.device)

    def step():
        with torch.autocast(a.device, dtype=torch.bfloat16):
            loss = model(input_ids=src, labels=tgt).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    us = unprofiled_us(step, 5)
    with profiler(active=2, cuda=a.device == "cuda") as prof:
        for _ in range(steps(2)):
            step()
            prof.step()
    export(prof, a.out, batch=a.batch, src=a.src, tgt=a.tgt, unprofiled_us_per_step=us,
           attn_implementation=getattr(model.config, "_attn_implementation", None))


if __name__ == "__main__":
    main()
