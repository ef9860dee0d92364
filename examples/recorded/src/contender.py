"""Another process on the same GPU: launches bursts of 8192x8192 bf16 GEMMs at random moments
until --seconds pass (or the file --stop exists)."""
import argparse, os, random, time, torch

p = argparse.ArgumentParser()
p.add_argument("--seconds", type=float, default=60)
p.add_argument("--stop", default="")
a = p.parse_args()
x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
rnd = random.Random(1)
end = time.time() + a.seconds
print("contender up", flush=True)
bursts = 0
while time.time() < end and not (a.stop and os.path.exists(a.stop)):
    time.sleep(rnd.uniform(0.0, 0.004))
    for _ in range(rnd.randint(1, 3)):
        y = x @ x
    torch.cuda.synchronize()
    bursts += 1
print("contender done", bursts, "bursts", flush=True)
