"""An inference loop: a Hugging Face GPT-2 (6 layers, random weights) scoring 20 batches of 8 x 128
tokens under no_grad in bf16, the predicted tokens copied back with `.cpu().tolist()` each batch;
one `with profile()` around the loop, warmed up, no steps."""
import sys
import torch
from torch.profiler import ProfilerActivity, profile
from transformers import GPT2Config, GPT2LMHeadModel


def main(out):
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=6)).cuda().to(torch.bfloat16).eval()
    batches = [torch.randint(0, 50257, (8, 128), device="cuda") for _ in range(20)]
    preds = []
    with torch.no_grad():
        model(batches[0])
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True,
                     record_shapes=True) as prof:
            for ids in batches:
                logits = model(ids).logits
                preds.append(logits[:, -1].argmax(-1).cpu().tolist())
    print(len(preds))
    prof.export_chrome_trace(out)


if __name__ == "__main__":
    main(sys.argv[1])
