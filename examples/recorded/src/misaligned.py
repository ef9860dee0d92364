"""bf16 GEMMs of an LM head and an MLP: --dims odd uses hidden 4095 and the GPT-2 vocabulary of
50257 (not multiples of 8); --dims aligned pads them to 4096 and 50304."""
import argparse, time, torch
from _prof import export, profiler


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dims", choices=["odd", "aligned"], default="odd")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    hidden, vocab = (4095, 50257) if a.dims == "odd" else (4096, 50304)
    dt = torch.bfloat16
    x = torch.randn(2048, 1024, device="cuda", dtype=dt)
    w_up = torch.randn(1024, hidden, device="cuda", dtype=dt)
    w_down = torch.randn(hidden, 1024, device="cuda", dtype=dt)
    w_vocab = torch.randn(1024, vocab, device="cuda", dtype=dt)

    def step():
        h = torch.relu(x @ w_up)
        h = h @ w_down
        logits = h @ w_vocab
        return logits

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    per_iter = (time.perf_counter() - t) / 20 * 1e6
    with torch.no_grad(), profiler(active=3) as prof:
        for _ in range(5):
            logits = step()
            prof.step()
    export(prof, a.out, dims=a.dims, hidden=hidden, vocab=vocab, unprofiled_us_per_iter=per_iter)


if __name__ == "__main__":
    main()
