"""The PyTorch half of bench/models_vs_pytorch.sh: one torchvision model's training step (random images,
forward, cross-entropy, backward, SGD with momentum) on `threads` threads; prints seconds per step,
images/s and peak memory in the same form as build/bench/model_step.
    /usr/bin/python3 bench/torch_model_step.py MODEL [batch=32] [steps=5] [threads=2]
"""
import resource
import sys
import time

import torch
import torchvision

name = sys.argv[1]
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 32
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 5
threads = int(sys.argv[4]) if len(sys.argv) > 4 else 2
torch.set_num_threads(threads)
torch.manual_seed(1)
model = getattr(torchvision.models, name)(num_classes=1000)
model.train()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(batch, 3, 224, 224)
y = torch.randint(0, 1000, (batch,))
loss_fn = torch.nn.CrossEntropyLoss()


def step():
    opt.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()
    opt.step()


step()
t0 = time.perf_counter()
for _ in range(steps):
    step()
seconds = (time.perf_counter() - t0) / steps
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
params = sum(p.numel() for p in model.parameters())
print(f"torch {name} batch {batch} threads {threads}: {seconds:.3f} s/step, {batch / seconds:.1f} images/s, "
      f"peak RSS {rss:.0f} MB, {params} parameters")
