#!/usr/bin/env python3
"""Draws a ddl_train metrics file (CSV or JSON lines) into a PNG: the learning curves (loss, accuracy),
and per epoch the images/s and the share of time spent waiting for communication.

usage: python3 launch/plot_metrics.py METRICS.csv|.jsonl [OUT.png]
Needs matplotlib (Debian: apt-get install python3-matplotlib).
"""
import csv
import json
import sys


def read_metrics(path):
    with open(path) as f:
        if path.endswith((".jsonl", ".json")):
            return [json.loads(line) for line in f if line.strip()]
        # A resumed run may append rows with columns that an older header lacks (DictReader's key None).
        return [{k: float(v) for k, v in row.items() if k is not None} for row in csv.DictReader(f)]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else path.rsplit(".", 1)[0] + ".png"
    rows = read_metrics(path)
    if not rows:
        sys.exit(f"plot_metrics: {path} holds no epochs")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [r["epoch"] for r in rows]
    fig, ((loss, acc), (speed, comm)) = plt.subplots(2, 2, figsize=(10, 8))
    loss.plot(epochs, [r["train_loss"] for r in rows], "o-", label="train")
    loss.plot(epochs, [r["val_loss"] for r in rows], "o-", label="validation")
    loss.set(xlabel="epoch", ylabel="loss", title="loss")
    acc.plot(epochs, [r["train_accuracy"] for r in rows], "o-", label="train")
    acc.plot(epochs, [r["val_accuracy"] for r in rows], "o-", label="validation")
    acc.set(xlabel="epoch", ylabel="accuracy", title="accuracy")
    speed.plot(epochs, [r["images_per_second"] for r in rows], "o-", label="training")
    speed.set(xlabel="epoch", ylabel="images/s", title="speed (all ranks)")
    # Files of earlier versions have no communication columns.
    comm.plot(epochs, [100 * r.get("comm_wait_share", 0) for r in rows], "o-", label="all-reduce wait")
    comm.plot(epochs, [100 * r.get("pipeline_wait_share", 0) for r in rows], "o-", label="pipeline idle")
    comm.set(xlabel="epoch", ylabel="% of epoch time", title="communication")
    for ax in (loss, acc, speed, comm):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print(f"plot_metrics: wrote {out}")


if __name__ == "__main__":
    main()
