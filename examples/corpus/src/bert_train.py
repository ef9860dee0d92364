"""Hugging Face BERT (random weights, 4 layers, d 512, 8 heads, the real 30522-word vocabulary)
trained with AdamW (default foreach) on batches already on the GPU. --mode cls:
BertForSequenceClassification in plain fp32, PyTorch's default (matmuls without TF32: the GEMMs
run on CUDA cores); --mode mlm: BertForMaskedLM under bf16 autocast, whose LM head multiplies by
the 30522-word vocabulary (not a multiple of 8)."""
import argparse, torch
from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification
from _prof import export, profiler, steps, unprofiled_us


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["cls", "mlm"], required=True)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    cfg = BertConfig(num_hidden_layers=4, hidden_size=512, num_attention_heads=8, intermediate_size=2048,
                     vocab_size=30522, num_labels=3)
    model = (BertForSequenceClassification if a.mode == "cls" else BertForMaskedLM)(cfg).to(a.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, cfg.vocab_size, (a.batch, a.seq), device=a.device)
    mask = torch.ones_like(ids)
    labels = torch.randint(0, 3, (a.batch,), device=a.device) if a.mode == "cls" else ids.clone()

    def step():
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.mode == "mlm"):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
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
    export(prof, a.out, mode=a.mode, batch=a.batch, seq=a.seq, unprofiled_us_per_step=us,
           attn_implementation=getattr(model.config, "_attn_implementation", None))


if __name__ == "__main__":
    main()
