"""Inference of a small bf16 MLP at batch 8 (12 Linear+GELU layers, d 512): --mode eager launches
every kernel from Python; --mode graphs captures the forward once in a torch.cuda.CUDAGraph and
replays it (one launch per step)."""
import argparse, torch
from models import mlp
from _prof import export, profiler, steps, unprofiled_us


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["eager", "graphs"], default="eager")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    model = mlp(d=512, depth=12).cuda().to(torch.bfloat16).eval()
    static_x = torch.randn(8, 512, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        if a.mode == "graphs":
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    model(static_x)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_y = model(static_x)
            run = graph.replay
        else:
            run = lambda: model(static_x)
        per_iter = unprofiled_us(run, iters=50)
        with profiler(active=5) as prof:
            for _ in range(steps(5)):
                run()
                prof.step()
    export(prof, a.out, mode=a.mode, unprofiled_us_per_iter=per_iter)


if __name__ == "__main__":
    main()
