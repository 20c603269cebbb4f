#!/usr/bin/env python3
"""Draws the confusion matrix of a ddl_eval result (--output FILE.json or FILE.csv) into a PNG: rows are
the true classes, columns the predicted ones, each cell the share of its row's images (the count written
in it), with the accuracy per class beside its name.

usage: python3 launch/plot_confusion.py EVAL.json|EVAL.csv [OUT.png]
Needs matplotlib (Debian: apt-get install python3-matplotlib).
"""
import csv
import json
import sys


def read_result(path):
    """(class names, confusion rows, top-1 accuracy) from either of ddl_eval's files."""
    with open(path) as f:
        if path.endswith(".json"):
            r = json.load(f)
            return [c["name"] for c in r["classes"]], r["confusion"], r["top1"]
        rows = list(csv.DictReader(f))
    total, classes = rows[0], rows[1:]
    columns = [k for k in rows[0] if k.startswith("predicted_")]
    return ([c["name"] for c in classes], [[float(c[k]) for k in columns] for c in classes],
            float(total["accuracy"]))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else path.rsplit(".", 1)[0] + ".png"
    names, confusion, top1 = read_result(path)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = len(names)
    shares = [[v / max(sum(row), 1) for v in row] for row in confusion]
    size = max(5, 0.55 * k + 2)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    image = ax.imshow(shares, cmap="Blues", vmin=0, vmax=1)
    labels = [f"{n} ({shares[i][i]:.0%})" for i, n in enumerate(names)]
    ax.set_xticks(range(k), names, rotation=90)
    ax.set_yticks(range(k), labels)
    ax.set(xlabel="predicted class", ylabel="true class (accuracy)", title=f"{path}: top-1 accuracy {top1:.4f}")
    if k <= 30:  # counts stay legible up to about 30 classes
        for t in range(k):
            for p in range(k):
                ax.text(p, t, f"{confusion[t][p]:.0f}", ha="center", va="center", fontsize=8,
                        color="white" if shares[t][p] > 0.5 else "black")
    fig.colorbar(image, ax=ax, label="share of the true class's images")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print(f"plot_confusion: wrote {out}")


if __name__ == "__main__":
    main()
