"""One `with profile()` around a single forward pass of a warmed-up torchvision ResNet-50 (fp32,
batch 64, eval, no_grad): no steps at all."""
import sys
import torch
import torchvision
from torch.profiler import ProfilerActivity, profile


def main(out):
    model = torchvision.models.resnet50().cuda().eval()
    x = torch.randn(64, 3, 224, 224, device="cuda")
    with torch.no_grad():
        model(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True,
                     record_shapes=True) as prof:
            y = model(x)
            torch.cuda.synchronize()
    print(y.shape)
    prof.export_chrome_trace(out)


if __name__ == "__main__":
    main(sys.argv[1])
