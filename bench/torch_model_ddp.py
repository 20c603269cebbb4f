"""PyTorch DDP (gloo) with a torchvision model on CPU, the peer of bench/strategies.sh: `ranks` processes of
`threads` threads, random 224x224 images, SGD with momentum, `batch` images per rank; one warm-up step, then
`steps` timed. Prints images/s over all ranks and the largest rank's peak memory. --bf16: the forward and
the loss under torch.autocast("cpu", dtype=torch.bfloat16), as bench/torch_model_step.py.
    /usr/bin/python3 bench/torch_model_ddp.py MODEL RANKS THREADS BATCH STEPS [--bf16]
"""
import os
import resource
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torchvision


def worker(rank, name, ranks, threads, batch, steps, bf16, queue):
    torch.set_num_threads(threads)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29533"
    dist.init_process_group("gloo", rank=rank, world_size=ranks)
    torch.manual_seed(1)
    model = torch.nn.parallel.DistributedDataParallel(getattr(torchvision.models, name)(num_classes=1000))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, 224, 224)
    y = torch.randint(0, 1000, (batch,))
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    dist.barrier()
    seconds = time.perf_counter() - t0
    queue.put((seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))
    dist.destroy_process_group()


if __name__ == "__main__":
    bf16 = "--bf16" in sys.argv
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    name, ranks, threads, batch, steps = args[0], *map(int, args[1:5])
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, name, ranks, threads, batch, steps, bf16, queue)) for r in range(ranks)]
    for p in procs:
        p.start()
    results = []
    while len(results) < ranks:
        try:
            results.append(queue.get(timeout=5))
        except Exception:  # queue.Empty: a worker that died (a crash in oneDNN, say) never reports
            if any(p.exitcode not in (None, 0) for p in procs):
                for p in procs:
                    p.kill()
                sys.exit(f"torch ddp {name}: a worker died (exit codes {[p.exitcode for p in procs]})")
    for p in procs:
        p.join()
    seconds = max(r[0] for r in results)
    print(f"torch ddp {name} {'bf16' if bf16 else 'f32'} ranks {ranks} threads {threads} batch {batch}: "
          f"{ranks * batch * steps / seconds:.1f} images/s, peak RSS {max(r[1] for r in results):.0f} MB (largest rank)")
