"""The TensorBoard tutorial's recipe: schedule(wait=1, warmup=1, active=3),
on_trace_ready=tensorboard_trace_handler(dir), prof.step() per batch. A bf16 transformer-block
stack trained with AdamW(foreach=False) and zero_grad(set_to_none=False)."""
import sys
import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler


def main(logdir):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
    model = nn.TransformerEncoder(layer, 4).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
    x = torch.randn(16, 256, 512, device="cuda")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 schedule=schedule(wait=1, warmup=1, active=3),
                 on_trace_ready=tensorboard_trace_handler(logdir), record_shapes=True,
                 with_stack=True) as prof:
        for _ in range(6):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x).float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=False)
            prof.step()


if __name__ == "__main__":
    main(sys.argv[1])
