"""A hand-written greedy decode loop over a Hugging Face GPT-2 (4 layers, random weights, bf16,
batch 1) with its KV cache: 32 new tokens, each checked against the end-of-text id with
`.item()`; one `with profile()` around the loop after a warm-up, no steps."""
import sys
import torch
from torch.profiler import ProfilerActivity, profile
from transformers import GPT2Config, GPT2LMHeadModel


def generate(model, ids, n):
    past, tok = None, ids
    for _ in range(n):
        out = model(tok, past_key_values=past, use_cache=True)
        past = out.past_key_values
        tok = out.logits[:, -1:].argmax(-1)
        ids = torch.cat([ids, tok], dim=1)
        if tok.item() == model.config.eos_token_id:
            break
    return ids


def main(out):
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=4)).cuda().to(torch.bfloat16).eval()
    prompt = torch.randint(0, 50000, (1, 64), device="cuda")
    with torch.no_grad():
        generate(model, prompt, 4)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True,
                     record_shapes=True) as prof:
            ids = generate(model, prompt, 32)
    print(ids.shape)
    prof.export_chrome_trace(out)


if __name__ == "__main__":
    main(sys.argv[1])
