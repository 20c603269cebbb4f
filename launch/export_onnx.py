#!/usr/bin/env python3
"""Exports a PyTorch module to ONNX the way ddl_train --model needs it, and checks that ddl builds it.
    python3 launch/export_onnx.py --module net.py:Net [--args '{"classes": 100}'] --input 3x224x224 \\
        --output net.onnx [--opset 13..17] [--no-check]
Imports the class from the file (its folder on sys.path, so that its own imports work), builds it with --args
as keyword arguments and exports it as docs/onnx.md says: in training mode (BatchNorms and their statistics
kept), every parameter an initializer under its state_dict name, input "images" [batch, C, H, W], output
"logits" [batch, classes], TorchScript's exporter; torchvision's stochastic depth as a dropout of a mask a row
(exportable_stochastic_depth) and nn.Dropout2d's as one of a mask an image and channel, so that nobody sets p to 0
to export. Then ddl_train plans a run of it (--plan-only, which builds
the layers and times a few steps) on two random images made for the purpose: the file is ready, or ddl's
reason why not. Bad input and a graph ddl refuses end in one line and exit 2.
"""
import argparse
import contextlib
import importlib.util
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import warnings

import ddl_torch
from ddl_torch import ToolError, torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPSETS = range(13, 18)  # the opsets ddl reads


def load_class(spec):
    """The class named by FILE.py:CLASS, its file imported with its folder first on sys.path."""
    path, sep, name = spec.rpartition(":")
    if not sep or not path or not name:
        raise ToolError(f"--module {spec}: give FILE.py:CLASS, e.g. net.py:Net")
    if not os.path.isfile(path):
        raise ToolError(f"--module {spec}: there is no file {path}")
    stem = os.path.splitext(os.path.basename(path))[0]
    module_name = stem if stem not in sys.modules else f"export_onnx_{stem}"
    found = importlib.util.spec_from_file_location(module_name, os.path.abspath(path))
    if found is None:
        raise ToolError(f"--module {spec}: {path} is not a Python file (.py)")
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    module = importlib.util.module_from_spec(found)
    sys.modules[module_name] = module  # dataclasses and pickling look their module up by name
    try:
        found.loader.exec_module(module)
    except (Exception, SystemExit) as e:
        raise ToolError(f"{path}: importing it failed ({one_line(e)})")
    cls = getattr(module, name, None)
    modules = [n for n, v in vars(module).items()
               if isinstance(v, type) and issubclass(v, torch.nn.Module) and v.__module__ == module_name]
    if cls is None:
        raise ToolError(f"{path} has no class {name} (its modules: {', '.join(modules) or 'none'})")
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        raise ToolError(f"{path}: {name} is not a torch.nn.Module subclass")
    return cls


def one_line(e):
    """An exception as TYPE: its first line, for a message of one line."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def input_shape(text, check):
    match = re.fullmatch(r"(\d+)x(\d+)x(\d+)", text)
    if not match or min(int(d) for d in match.groups()) < 1:
        raise ToolError(f"--input {text}: give the images' CxHxW, e.g. 3x224x224")
    shape = tuple(int(d) for d in match.groups())
    if check and shape[0] != 3:
        raise ToolError(f"--input {text}: ddl trains on RGB images (ddl_data imports 3 channels), so ddl_train would "
                        "refuse a model of other images (--no-check exports it anyway)")
    return shape


def keyword_arguments(text):
    try:
        values = json.loads(text)
    except json.JSONDecodeError as e:
        raise ToolError(f"--args is not JSON ({e}): give an object, e.g. '{{\"classes\": 100}}'")
    if not isinstance(values, dict):
        raise ToolError(f"--args {text}: give a JSON object of keyword arguments, e.g. '{{\"classes\": 100}}'")
    return values


def exportable_stochastic_depth(x, p, mode, training=True):
    """torchvision's stochastic_depth as the TorchScript exporter can write it in training mode (its
    Bernoulli it cannot): x times a dropout of ones, one a row (mode "row") or one for the batch, which keeps
    each with probability 1 - p and scales it by 1 / (1 - p), as torchvision's mask does. The ones are the
    first element of each row times 0 plus 1 (Slice, Mul, Add), so that their batch follows the images'; ddl
    draws the dropout's mask afresh each step."""
    if not training or p == 0.0:
        return x
    first = (slice(None),) if mode == "row" else (slice(0, 1),)
    ones = x[first + (slice(0, 1),) * (x.dim() - 1)] * 0 + 1
    return x * torch.nn.functional.dropout(ones, p, True)


def exportable_channel_dropout(original, batched_rank):
    """F.dropout1d/2d/3d (nn.Dropout2d's; PyTorch 1.13 cannot export its feature dropout in training mode) as x
    times a dropout of ones, one for each image and channel: each channel kept with probability 1 - p and
    scaled by 1 / (1 - p), as PyTorch's; ddl draws the mask afresh each step. An input without a batch axis
    (of rank below `batched_rank`) goes to the original function."""
    def dropout(x, p=0.5, training=True, inplace=False):
        if x.dim() != batched_rank:
            return original(x, p, training, inplace)
        if not training or p == 0.0:
            return x
        ones = x[(slice(None), slice(None)) + (slice(0, 1),) * (x.dim() - 2)] * 0 + 1
        return x * torch.nn.functional.dropout(ones, p, True)
    return dropout


@contextlib.contextmanager
def random_masks_exportable():
    """torchvision.ops.stochastic_depth (and StochasticDepth, which calls it) and the channel dropouts replaced
    for the export only."""
    import torchvision.ops
    module = sys.modules["torchvision.ops.stochastic_depth"]  # torchvision.ops.stochastic_depth is the function
    original = module.stochastic_depth
    functional = torch.nn.functional
    channel_dropouts = {name: getattr(functional, name) for name in ("dropout1d", "dropout2d", "dropout3d")
                        if hasattr(functional, name)}
    module.stochastic_depth = torchvision.ops.stochastic_depth = exportable_stochastic_depth
    for name, original in channel_dropouts.items():
        setattr(functional, name, exportable_channel_dropout(original, int(name[-2]) + 2))
    try:
        yield
    finally:
        module.stochastic_depth = torchvision.ops.stochastic_depth = original
        for name, function in channel_dropouts.items():
            setattr(functional, name, function)


def export_graph(model, shape, opset):
    """The module's ONNX graph, exported as ddl needs it. Tracing runs the module once in training mode,
    which moves each BatchNorm's running statistics a momentum's step towards the dummy batch's (running_var
    1 -> 0.9) before they are written: the graph gets the values the module had."""
    onnx = ddl_torch.need("onnx")
    from onnx import numpy_helper
    before = {name: b.detach().clone() for name, b in model.named_buffers()}
    model.train()
    written = io.BytesIO()
    with warnings.catch_warnings(), random_masks_exportable():
        # Every BatchNorm's num_batches_tracked += 1, which ONNX has no place for and ddl does not need.
        warnings.filterwarnings("ignore", message=".*Removing mutation from node aten::add_ on block input")
        torch.onnx.export(model, torch.zeros(2, *shape), written, opset_version=opset,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          input_names=["images"], output_names=["logits"],
                          dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}},
                          **ddl_torch.torchscript_exporter())
    graph = onnx.load_from_string(written.getvalue())
    for tensor in graph.graph.initializer:
        if tensor.name in before and before[tensor.name].is_floating_point():
            tensor.CopyFrom(numpy_helper.from_array(before[tensor.name].float().numpy(), tensor.name))
    with torch.no_grad():
        for name, b in model.named_buffers():
            b.copy_(before[name])
    return graph


def ddl_program(name):
    """ddl's program NAME: in $DDL_BIN_DIR, else in this checkout's build folder, else on PATH."""
    if os.environ.get("DDL_BIN_DIR"):
        return os.path.join(os.environ["DDL_BIN_DIR"], name)
    built = os.path.join(ROOT, "build", "launch", name)
    return built if os.path.exists(built) else shutil.which(name)


def check_with_ddl(args, graph, shape):
    """ddl_train --plan-only on the file: it builds the layers and times a few steps of them. ddl_train
    needs a dataset for that: two random images of the input's size, imported by ddl_data."""
    ddl_train, ddl_data = ddl_program("ddl_train"), ddl_program("ddl_data")
    for program, name in ((ddl_train, "ddl_train"), (ddl_data, "ddl_data")):
        if not program or not os.path.exists(program):
            raise ToolError(f"wrote {args.output}, but cannot check it: no {name} (build ddl with bash "
                            "launch/setup.sh, set DDL_BIN_DIR, or give --no-check)")
    dims = graph.graph.output[0].type.tensor_type.shape.dim
    classes = dims[1].dim_value if len(dims) == 2 else 0  # else ddl_train says what it thinks of the output
    image = ddl_torch.need("PIL.Image")
    with tempfile.TemporaryDirectory(prefix="ddl_export_onnx_") as folder:
        for label in ("a", "b"):
            os.makedirs(os.path.join(folder, "images", label))
            seed = torch.Generator().manual_seed(ord(label))
            pixels = torch.randint(0, 256, (shape[1], shape[2], shape[0]), dtype=torch.uint8, generator=seed)
            image.fromarray(pixels.numpy()).save(os.path.join(folder, "images", label, "0.png"))
        data = os.path.join(folder, "check.h5")
        made = subprocess.run([ddl_data, "import", "--from", os.path.join(folder, "images"), "--output", data],
                              capture_output=True, text=True)
        if made.returncode != 0:
            raise ToolError(f"wrote {args.output}, but cannot check it: ddl_data made no dataset "
                            f"({first_line(made, 'ddl_data')})")
        plan = [ddl_train, "--model", args.output, "--train", data, "--plan-only", "--strategy", "auto",
                "--batch-size", "2"] + (["--num-classes", str(classes)] if classes >= 2 else [])
        verdict = subprocess.run(plan, capture_output=True, text=True)
    if verdict.returncode != 0:
        print(first_line(verdict, "ddl_train"), file=sys.stderr)
        sys.exit(2)
    shown = os.path.relpath(ddl_train)
    shown = ddl_train if shown.startswith("..") else shown
    print(f"export_onnx: {args.output} is ready (ddl_train builds it); train it with: "
          f"{shlex.quote(shown)} --model {shlex.quote(args.output)} --train TRAIN.h5")


def first_line(run, program):
    """A program's first error line, or how it ended."""
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(f"{program}: error")]
    if errors or lines:
        return (errors or lines)[0]
    return f"{program} ended with exit code {run.returncode} and no message"


def export(args):
    if args.opset not in OPSETS:
        raise ToolError(f"--opset {args.opset}: ddl reads opsets {OPSETS.start} to {OPSETS.stop - 1}")
    shape = input_shape(args.input, not args.no_check)
    arguments = keyword_arguments(args.args)
    folder = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(folder):
        raise ToolError(f"--output {args.output}: there is no folder {folder}")
    cls = load_class(args.module)
    try:
        model = cls(**arguments)
    except Exception as e:
        raise ToolError(f"{cls.__name__}(**{json.dumps(arguments)}) failed ({one_line(e)})")
    try:
        graph = export_graph(model, shape, args.opset)
    except ToolError:
        raise
    except Exception as e:  # the module's forward at this input, or an operator ONNX cannot express
        raise ToolError(f"{cls.__name__} did not export at input {args.input}, opset {args.opset} ({one_line(e)})")
    onnx = ddl_torch.need("onnx")
    ddl_torch.save_atomically(lambda path: onnx.save(graph, path), args.output)
    if args.no_check:
        print(f"export_onnx: wrote {args.output} (not checked: --no-check)")
        return
    check_with_ddl(args, graph, shape)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--module", required=True, metavar="FILE.py:CLASS", help="the module's class and its file")
    parser.add_argument("--args", default="{}", metavar="JSON",
                        help="the class's keyword arguments, a JSON object (default {})")
    parser.add_argument("--input", required=True, metavar="CxHxW", help="one image's shape, e.g. 3x224x224")
    parser.add_argument("--output", required=True, metavar="FILE.onnx", help="the ONNX file to write")
    parser.add_argument("--opset", type=int, default=17, help="ONNX opset, 13 to 17 (default 17)")
    parser.add_argument("--no-check", action="store_true", help="do not check that ddl_train builds the file")
    ddl_torch.run_tool(export, parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
