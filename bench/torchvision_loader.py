"""The peer of build/bench/loader_throughput: torchvision's ImageNet training pipeline on the same JPEG folder,
ImageFolder + PIL decoding + RandomResizedCrop(SIZE) + RandomHorizontalFlip + ToTensor + Normalize, batched
by a DataLoader. THREADS 1: the main process decodes (num_workers 0); THREADS > 1: that many worker
processes. Each process computes on one thread. The last line ends in "<rate> images/s".

    python3 bench/torchvision_loader.py FOLDER SIZE THREADS [IMAGES]
"""
import sys
import time

import torch
from torchvision import datasets, transforms


def main():
    folder, size, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    limit = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    torch.set_num_threads(1)
    transform = transforms.Compose([
        transforms.RandomResizedCrop(size),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ])
    dataset = datasets.ImageFolder(folder, transform)
    if limit:
        dataset = torch.utils.data.Subset(dataset, range(min(limit, len(dataset))))
    workers = threads if threads > 1 else 0
    loader = torch.utils.data.DataLoader(dataset, batch_size=64, shuffle=True, num_workers=workers,
                                         worker_init_fn=lambda _: torch.set_num_threads(1))
    start = time.perf_counter()
    images = 0
    for batch, _ in loader:
        images += batch.shape[0]
    seconds = time.perf_counter() - start
    print(f"torchvision, {threads} {'process' if threads == 1 else 'worker processes'}, RandomResizedCrop + flip to "
          f"{size}x{size}: {images} images in {seconds:.3f} s, {images / seconds:.1f} images/s")


if __name__ == "__main__":
    main()
