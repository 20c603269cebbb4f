"""The PyTorch half of bench/models_vs_pytorch.sh: one torchvision model's (or bench/lab_networks.py's) training step (random images,
forward, cross-entropy, backward, SGD with momentum) on `threads` threads; prints seconds per step,
images/s and peak memory in the same form as build/bench/model_step. --bf16: the forward and the loss
under torch.autocast("cpu", dtype=torch.bfloat16), PyTorch's CPU mixed precision. --size=N: images of
NxN (224 without it). --no-dropout: dropout and stochastic depth at p = 0.
    /usr/bin/python3 bench/torch_model_step.py MODEL [batch=32] [steps=5] [threads=2] [--bf16] [--size=N] [--no-dropout]
"""
import resource
import sys
import time

import torch
import torchvision

bf16 = "--bf16" in sys.argv
no_dropout = "--no-dropout" in sys.argv
size = int(next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--size=")), 224))
args = [a for a in sys.argv[1:] if not a.startswith("--")]
name = args[0]
batch = int(args[1]) if len(args) > 1 else 32
steps = int(args[2]) if len(args) > 2 else 5
threads = int(args[3]) if len(args) > 3 else 2
torch.set_num_threads(threads)
torch.manual_seed(1)
# A vision transformer is built for the image size (its position embeddings are one per patch); lab_* are
# bench/lab_networks.py's.
if name.startswith("lab_"):
    import lab_networks
    model = lab_networks.lab_network(name, 1000)
else:
    model = getattr(torchvision.models, name)(num_classes=1000, **({"image_size": size} if name.startswith("vit_") else {}))
model.train()
if no_dropout:  # as bench/onnx_vs_pytorch.sh exports the graphs ddl trains
    for module in model.modules():
        if isinstance(module, (torch.nn.Dropout, torchvision.ops.StochasticDepth)):
            module.p = 0.0
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(batch, 3, size, size)
y = torch.randint(0, 1000, (batch,))
loss_fn = torch.nn.CrossEntropyLoss()


def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()


step()
t0 = time.perf_counter()
for _ in range(steps):
    step()
seconds = (time.perf_counter() - t0) / steps
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
params = sum(p.numel() for p in model.parameters())
print(f"torch {name} {'bf16' if bf16 else 'f32'} batch {batch} threads {threads}: {seconds:.3f} s/step, {batch / seconds:.1f} images/s, "
      f"peak RSS {rss:.0f} MB, {params} parameters")
