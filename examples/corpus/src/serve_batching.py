"""An inference server's decode loop over Hugging Face GPT-2 (random weights, bf16, 4 layers):
requests are batched 16 at a time and decoded token by token with the KV cache
(past_key_values), greedy, the next token read back with .tolist() for the per-request stop
check the way a server streams tokens out. Each profiled step is one batch of 24 decode steps."""
import argparse, torch
from transformers import GPT2Config, GPT2LMHeadModel
from _prof import export, profiler, steps


@torch.no_grad()
def decode(model, prompts, new_tokens, eos=0):
    out = model(input_ids=prompts, use_cache=True)
    past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
    done = [False] * prompts.shape[0]
    streamed = [[] for _ in done]
    for _ in range(new_tokens):
        out = model(input_ids=nxt, past_key_values=past, use_cache=True)
        past = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        for r, tok in enumerate(nxt.squeeze(1).tolist()):
            if not done[r]:
                streamed[r].append(tok)
                done[r] = tok == eos
    return streamed


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--tokens", type=int, default=24)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=4, n_embd=768, n_head=12, vocab_size=32000, n_positions=512)
    model = GPT2LMHeadModel(cfg).to("cuda", torch.bfloat16).eval()
    prompts = torch.randint(1, cfg.vocab_size, (a.batch, 64), device="cuda")
    decode(model, prompts, 4)
    torch.cuda.synchronize()
    with profiler(active=2) as prof:
        for _ in range(steps(2)):
            streamed = decode(model, prompts, a.tokens)
            prof.step()
    export(prof, a.out, batch=a.batch, tokens=a.tokens, streamed=len(streamed[0]))


if __name__ == "__main__":
    main()
