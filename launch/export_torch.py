#!/usr/bin/env python3
"""Exports a ddl_train checkpoint to PyTorch: a state_dict (torch.save of the dict) for torchvision's
definition of the same model, with torchvision's own keys, and optionally an ONNX file.
    python3 launch/export_torch.py best.h5 model.pt [--onnx model.onnx]
alexnet, vgg16, resnet18, resnet50: torchvision.models.<name>(num_classes=N).load_state_dict(...);
vit_b16: torchvision.models.VisionTransformer (vit_b_16's shape); the CIFAR-size ResNets: torchvision's
ResNet with a 3x3 stride-1 conv1 and an Identity maxpool; seed_cnn, seed_cnn_bn, alexnet_cifar, vgg16_cifar:
the modules of launch/ddl_torch.py (ddl_torch.torch_model(name, N) builds any of them). A model imported
from ONNX: the state_dict under the graph's names, which PyTorch gave them (strict=False), and with --onnx
the same graph with the trained weights.
"""
import argparse
import sys
import warnings

import ddl_torch
from ddl_torch import ToolError, torch


def export_graph(args, c):
    """A model imported from ONNX (ddl_train --model FILE.onnx): a state_dict keyed by the graph's
    initializer names, PyTorch's own names where PyTorch exported it, and with --onnx the same graph with the
    trained weights. BatchNorm's num_batches_tracked is not in ONNX: load with strict=False."""
    onnx = ddl_torch.need("onnx")
    import numpy
    from onnx import numpy_helper
    model = onnx.load_from_string(c.graph)
    initializers = {t.name: t for t in model.graph.initializer}
    dims = {name: list(initializers[c.graph_names[name]].dims) for name in c.param_names}
    extra = c.params.size - sum(int(numpy.prod(d, dtype=numpy.int64)) for d in dims.values())
    if extra:  # a classifier refitted to the run's class count: the last [out, in] weight and its bias
        weight = [name for name in c.param_names if len(dims[name]) == 2][-1]
        biased = c.param_names[-1] != weight
        per_class = dims[weight][1] + biased
        if extra % per_class:
            raise ToolError(f"{args.checkpoint}: holds {c.params.size} parameters, which its graph has for no "
                            "class count (damaged?)")
        for name in (weight, c.param_names[-1]):
            dims[name][0] += extra // per_class
    tensors, at = {}, 0
    for name in c.param_names:
        size = int(numpy.prod(dims[name], dtype=numpy.int64))
        tensors[c.graph_names[name]] = c.params[at:at + size].reshape(dims[name])
        at += size
    for name, values in c.states.items():
        if name in c.graph_names:
            tensors[c.graph_names[name]] = values.reshape(list(initializers[c.graph_names[name]].dims))
    state = {key: torch.from_numpy(numpy.ascontiguousarray(v)) for key, v in tensors.items()}
    ddl_torch.save_atomically(lambda path: torch.save(state, path), args.output)
    print(f"export_torch: wrote {args.output}: the state_dict of {c.model}, {len(state)} tensors under the graph's "
          "names (load_state_dict(..., strict=False): ONNX keeps no num_batches_tracked)")
    if args.onnx:
        for key, values in tensors.items():
            initializers[key].CopyFrom(numpy_helper.from_array(numpy.ascontiguousarray(values, dtype=numpy.float32), key))
        shape = model.graph.output[0].type.tensor_type.shape
        if len(shape.dim) == 2:  # [batch, classes]: the run's classes
            shape.dim[1].dim_value = tensors[c.graph_names[c.param_names[-1]]].shape[0]
        ddl_torch.save_atomically(lambda path: onnx.save(model, path), args.onnx)
        try:
            onnx.checker.check_model(onnx.load(args.onnx))
        except Exception as e:  # onnx.checker.ValidationError, or a file onnx cannot parse
            raise ToolError(f"{args.onnx}: refused by onnx.checker ({str(e).splitlines()[0]})")
        print(f"export_torch: wrote {args.onnx}: the graph with the trained weights, checked by onnx.checker")


def export(args):
    onnx = ddl_torch.need("onnx") if args.onnx else None
    c = ddl_torch.read_checkpoint(args.checkpoint)
    if c.graph:
        return export_graph(args, c)
    settings = ddl_torch.model_settings(c.model, ddl_torch.parse_configuration(c.configuration))
    # --num-classes, else the training set's (its class names), else solved from the parameter count.
    classes = int(ddl_torch.parse_configuration(c.configuration).get("num-classes", "0")) or len(c.class_names)
    if classes < 2:  # "the training set's" and no names: the classifier makes the count linear in it
        def parameter_count(n):
            return sum(p.numel() for p in ddl_torch.torch_model(c.model, n, **settings).parameters())
        two = parameter_count(2)
        classes = 2 + (len(c.params) - two) // (parameter_count(3) - two)
    model = ddl_torch.torch_model(c.model, classes, **settings)
    if sum(p.numel() for p in model.parameters()) != len(c.params):
        raise ToolError(f"{args.checkpoint}: holds {len(c.params)} parameters, not those of {c.model} with {classes} "
                        "classes")
    tensors = model.state_dict()
    keys = ddl_torch.torch_keys_in_ddl_order(c.model, model)
    if len(keys) != len(c.param_names):
        raise ToolError(f"{args.checkpoint}: names {len(c.param_names)} parameter tensors, {c.model} has {len(keys)}")
    at = 0
    # The sizes are PyTorch's own: what checks the pairing is the total above and the logits (the tests).
    sizes = [(name, tensors[key].numel()) for name, key in zip(c.param_names, keys)]
    for name, key in ddl_torch.pair_tensors(c.model, model, sizes, c.states):
        if name in c.states:
            values = c.states[name]
        else:
            values = c.params[at:at + tensors[key].numel()]
            at += tensors[key].numel()
        tensors[key].copy_(torch.from_numpy(values.copy()).reshape(tensors[key].shape))
    model.eval()
    ddl_torch.save_atomically(lambda path: torch.save(model.state_dict(), path), args.output)
    print(f"export_torch: wrote {args.output}: {c.model} with {classes} classes, {len(c.params)} parameters")
    if onnx:
        size = settings["image_size"]
        images = torch.zeros(1, 3, size, size)
        # torchvision's ViT asserts its input size, which tracing fixes anyway: no news to the user.
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        # Traced with gradients on: in evaluation without them, PyTorch's attention takes a fused path
        # (aten::_native_multi_head_attention) that ONNX has no operator for.
        ddl_torch.save_atomically(lambda path: torch.onnx.export(
            model, images, path, input_names=["images"], output_names=["logits"], opset_version=14,
            dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}}, **ddl_torch.torchscript_exporter()),
            args.onnx)
        try:
            onnx.checker.check_model(onnx.load(args.onnx))
        except Exception as e:  # onnx.checker.ValidationError, or a file onnx cannot parse
            raise ToolError(f"{args.onnx}: refused by onnx.checker ({str(e).splitlines()[0]})")
        print(f"export_torch: wrote {args.onnx} (input 'images' [N, 3, {size}, {size}], output 'logits'), "
              "checked by onnx.checker")
    if c.input_mean:
        print(f"export_torch: the model takes RGB images in [0, 1] less mean {[float(m) for m in c.input_mean]}, "
              f"divided by std {[float(d) for d in c.input_std]}, as in training")
    else:
        print("export_torch: the model takes RGB images scaled to [0, 1], as in training")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("checkpoint", help="a ddl_train checkpoint (best.h5, last.h5)")
    parser.add_argument("output", help="the state_dict to write (.pt)")
    parser.add_argument("--onnx", metavar="FILE", help="also an ONNX file of the model in evaluation mode")
    ddl_torch.run_tool(export, parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
