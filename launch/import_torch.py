#!/usr/bin/env python3
"""Imports PyTorch weights into a ddl checkpoint: a state_dict of torchvision's definition of a ddl model
(as launch/export_torch.py writes it, or torchvision's published weights) becomes a checkpoint that
ddl_train --init starts from and ddl_eval and ddl_predict run.
    python3 launch/import_torch.py model.pt init.h5 --model resnet18 [--class-names FILE]
                                   [--normalize imagenet|scale] [--image-size S] [--ddl-data PATH]
The class count is the classifier's. ddl's own parameter names come from `ddl_data model` (found on PATH
or in this checkout's build/ folder).
"""
import argparse
import sys

import ddl_torch
from ddl_torch import ToolError, torch

IMAGENET_MODELS = ("alexnet", "vgg16", "resnet18", "resnet50", "vit_b16")


def load_state_dict(path):
    try:
        # Tensors and containers only: unpickling anything else could run code from the file.
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch.load's errors for a foreign or damaged file are of many kinds
        raise ToolError(f"{path}: cannot be read by torch.load as a state_dict ({str(e).splitlines()[0]})")
    if not isinstance(loaded, dict) or not all(isinstance(v, torch.Tensor) for v in loaded.values()):
        raise ToolError(f"{path}: does not hold a state_dict (a dict of tensors)")
    return loaded


def import_weights(args):
    if args.model not in ddl_torch.MODELS:
        raise ToolError(f"--model {args.model} is not one of ddl's ({', '.join(ddl_torch.MODELS)})")
    state = load_state_dict(args.weights)
    settings = ddl_torch.model_settings(args.model, {"image-size": str(args.image_size)})
    # Every ddl model ends in its classifier's bias.
    last = ddl_torch.torch_keys_in_ddl_order(args.model, ddl_torch.torch_model(args.model, 2, **settings))[-1]
    if last not in state:
        raise ToolError(f"{args.weights}: no '{last}': not the weights of {args.model} "
                        f"(its keys begin {', '.join(list(state)[:3])})")
    classes = state[last].numel()
    model = ddl_torch.torch_model(args.model, classes, **settings)
    missing, unexpected = [], []
    try:
        result = model.load_state_dict(state, strict=False)
        missing, unexpected = result.missing_keys, result.unexpected_keys
    except RuntimeError as e:  # shapes that differ
        raise ToolError(f"{args.weights}: not the weights of {args.model} with {classes} classes "
                        f"({str(e).splitlines()[-1].strip()})")
    if missing or unexpected:
        raise ToolError(f"{args.weights}: not the weights of {args.model}: missing {missing[:3]}, "
                        f"unexpected {unexpected[:3]}")
    class_names = []
    if args.class_names:
        try:
            with open(args.class_names, encoding="utf-8") as f:
                class_names = [line.strip() for line in f if line.strip()]
        except UnicodeDecodeError:
            raise ToolError(f"{args.class_names}: not UTF-8 text")
        if len(class_names) != classes:
            raise ToolError(f"{args.class_names}: {len(class_names)} class names for a classifier of {classes}")
    normalize = args.normalize or ("imagenet" if args.model in IMAGENET_MODELS else "scale")
    mean, std = (ddl_torch.IMAGENET_MEAN, ddl_torch.IMAGENET_STD) if normalize == "imagenet" else ((), ())

    params, states = ddl_torch.ddl_layout(args.ddl_data, args.model, classes, settings)
    tensors = model.state_dict()
    sizes = [(name, int(torch.tensor(dims).prod())) for name, dims in params]
    flat, state_values = [], {}
    for name, key in ddl_torch.pair_tensors(args.model, model, sizes, states):
        values = tensors[key].detach().to(torch.float32).reshape(-1).numpy()
        if name in states:
            state_values[name] = values
        else:
            flat.append(values)
    import numpy
    configuration = f"model = {args.model}\nnum-classes = {classes}\nimage-size = {settings['image_size']}\n"
    if args.model in ddl_torch.VIT_SHAPES:
        configuration += "".join(f"{k.replace('_', '-')} = {settings[k]}\n" for k in ddl_torch.VIT_SHAPES[args.model])
    checkpoint = ddl_torch.Checkpoint(args.model, configuration + f"imported-from = {args.weights}\n",
                                      [name for name, _ in params], numpy.concatenate(flat), state_values,
                                      class_names, mean, std)
    ddl_torch.write_checkpoint(args.output, checkpoint)
    print(f"import_torch: wrote {args.output}: {args.model} with {classes} classes, "
          f"{len(checkpoint.params)} parameters, inputs {'normalised as ImageNet' if mean else 'scaled to [0, 1]'}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("weights", help="a state_dict saved with torch.save (.pt, .pth)")
    parser.add_argument("output", help="the ddl checkpoint to write (.h5)")
    parser.add_argument("--model", required=True, help="ddl's name of the model: " + ", ".join(ddl_torch.MODELS))
    parser.add_argument("--class-names", metavar="FILE", help="the classes' names, a line each, in output order")
    parser.add_argument("--normalize", choices=("imagenet", "scale"),
                        help="how the weights expect images: ImageNet's mean and std (the default for the "
                             "ImageNet-size models), or pixels scaled to [0, 1] (the default for the others)")
    parser.add_argument("--image-size", type=int, default=0, help="input height and width (0: the model's)")
    parser.add_argument("--ddl-data", default=ddl_torch.default_ddl_data(), help="the ddl_data program")
    ddl_torch.run_tool(import_weights, parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
