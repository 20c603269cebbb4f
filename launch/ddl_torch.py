"""ddl's models in PyTorch, and the correspondence of their weights: what launch/export_torch.py and
launch/import_torch.py share.

The ImageNet-size models are torchvision's own (alexnet, vgg16, resnet18, resnet50, and vit_b16 as
torchvision's VisionTransformer); the CIFAR-size ResNets are torchvision's ResNet with the usual CIFAR stem
(conv1 a 3x3 stride-1 convolution without bias, maxpool an Identity: the same keys); the other small models
are defined here, with torchvision's key layout where torchvision has the same shape of network.

ddl keeps parameters in plain layouts (convolutions OIHW, dense layers [out, in], as PyTorch), so a
tensor moves by a reshape. The parameters pair up in order: ddl's order is torchvision's registration
order, except that ddl's ViT holds its class token after the patch embedding's convolution. BatchNorm's
running statistics go with the BatchNorm's parameters.

    torch_model("resnet18_cifar", num_classes=10)   # the module a ddl checkpoint exports to
"""
import importlib
import inspect
import os
import sys

# What Debian calls the package of each Python module these tools use.
DEBIAN_PACKAGES = {"torch": "python3-torch", "torchvision": "python3-torchvision", "h5py": "python3-h5py",
                   "onnx": "python3-onnx", "numpy": "python3-numpy", "PIL.Image": "python3-pil"}

# ddl's models and their default image sizes.
MODELS = {
    "seed_cnn": 32, "seed_cnn_bn": 32, "alexnet": 224, "alexnet_cifar": 32, "vgg16": 224, "vgg16_cifar": 32,
    "resnet18": 224, "resnet18_cifar": 32, "resnet50": 224, "resnet50_cifar": 32, "vit_b16": 224, "vit_tiny": 32,
}
VIT_SHAPES = {"vit_b16": dict(patch_size=16, depth=12, width=768, heads=12),
              "vit_tiny": dict(patch_size=4, depth=2, width=64, heads=4)}
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class ToolError(Exception):
    """A problem with the user's input: one line, exit 2."""


def fail(message, code=2):
    print(f"{os.path.basename(sys.argv[0])}: error: {message}", file=sys.stderr)
    sys.exit(code)


def need(module):
    try:
        return importlib.import_module(module)
    except ImportError:
        fail(f"the Python module {module} is missing: install Debian's {DEBIAN_PACKAGES[module]} "
             f"(apt-get install {DEBIAN_PACKAGES[module]})")


torch = need("torch")
torchvision = need("torchvision")
nn = torch.nn


def run_tool(action, args):
    """Runs a tool's action: a problem with its input ends in one line and exit 2, not a traceback."""
    try:
        action(args)
    except ToolError as e:
        fail(str(e))
    except OSError as e:
        fail(f"{e.filename}: {e.strerror}" if e.filename else str(e))


def torchscript_exporter():
    """torch.onnx.export's options that keep its TorchScript exporter. PyTorch 2.9 and later export through
    dynamo by default: at opset 18 and up, a graph made for inference (BatchNorms folded away in training
    mode, equal initializers merged into one, weights transposed into unnamed constants), its weights in a
    second file beside it."""
    return {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}


def save_atomically(write, path):
    """write(tmp) writes the file to path.tmp, which then replaces path: a failure leaves path as it was."""
    tmp = path + ".tmp"
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        if isinstance(e, RuntimeError):  # torch.save's word for a missing folder or a full disk
            raise ToolError(f"{path}: cannot be written ({str(e).splitlines()[0]})")
        raise


def model_settings(name, values):
    """The settings a model was built with, from a checkpoint's configuration (0: the model's own)."""
    if name not in MODELS:
        raise ToolError(f"model '{name}' is not one of ddl's ({', '.join(MODELS)})")

    def number(key):
        try:
            return int(float(values.get(key, "0")))
        except ValueError:
            raise ToolError(f"configuration line '{key} = {values[key]}' does not hold a number")
    settings = {"image_size": number("image-size") or MODELS[name]}
    if name in VIT_SHAPES:
        for key, default in VIT_SHAPES[name].items():
            settings[key] = number(key.replace("_", "-")) or default
    return settings


def torch_model(name, num_classes, image_size=None, patch_size=None, depth=None, width=None, heads=None):
    """The PyTorch module with the structure of ddl's model `name`."""
    size = image_size or MODELS[name]
    if name in ("alexnet", "vgg16") and size != 224:
        raise ToolError(f"torchvision's {name} pools adaptively to a fixed grid, which equals ddl's {name} "
                        f"only at 224 x 224 images, not {size}")
    if name == "alexnet":
        return torchvision.models.alexnet(num_classes=num_classes)
    if name == "vgg16":
        return torchvision.models.vgg16(num_classes=num_classes)
    if name.startswith("resnet"):
        model = getattr(torchvision.models, name.removesuffix("_cifar"))(num_classes=num_classes)
        if name.endswith("_cifar"):
            model.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
            model.maxpool = nn.Identity()
        return model
    if name in VIT_SHAPES:
        shape = dict(VIT_SHAPES[name])
        shape.update({k: v for k, v in dict(patch_size=patch_size, depth=depth, width=width, heads=heads).items() if v})
        return torchvision.models.VisionTransformer(
            image_size=size, patch_size=shape["patch_size"], num_layers=shape["depth"], num_heads=shape["heads"],
            hidden_dim=shape["width"], mlp_dim=4 * shape["width"], num_classes=num_classes)
    if name in ("seed_cnn", "seed_cnn_bn"):
        return SeedCnn(num_classes, batch_norm=name == "seed_cnn_bn")
    if name == "alexnet_cifar":
        return AlexNetCifar(num_classes, size)
    if name == "vgg16_cifar":
        return Vgg16Cifar(num_classes, size)
    raise ToolError(f"no PyTorch definition of model '{name}'")


class SeedCnn(nn.Module):
    """Abdulkarim et al.'s CNN (2026) (32 x 32 images), or with BatchNorm after each convolution (seed_cnn_bn)."""

    def __init__(self, num_classes, batch_norm=False):
        super().__init__()
        self.batch_norm = batch_norm
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1, bias=not batch_norm)
        if batch_norm:
            self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1, bias=not batch_norm)
        if batch_norm:
            self.bn2 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(64 * 8 * 8, 64)
        self.dropout = nn.Dropout(0.3 if batch_norm else 0.0)
        self.fc2 = nn.Linear(64, num_classes)

    def forward(self, x):
        f = nn.functional
        x = self.conv1(x)
        x = f.max_pool2d(f.relu(self.bn1(x) if self.batch_norm else x), 2)
        x = self.conv2(x)
        x = f.max_pool2d(f.relu(self.bn2(x) if self.batch_norm else x), 2)
        x = f.relu(self.fc1(x.flatten(1)))
        return self.fc2(self.dropout(x))

def pooled(size):
    return (size - 3) // 2 + 1

class AlexNetCifar(nn.Module):
    """ddl's alexnet_cifar with torchvision AlexNet's keys: 5 x 5 first convolutions at stride 1, a
    1024-wide classifier."""

    def __init__(self, num_classes, size=32):
        super().__init__()
        side = pooled(pooled(pooled(size)))
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
            nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
            nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2))
        self.classifier = nn.Sequential(
            nn.Dropout(0.5), nn.Linear(256 * side * side, 1024), nn.ReLU(inplace=True),
            nn.Dropout(0.5), nn.Linear(1024, 1024), nn.ReLU(inplace=True), nn.Linear(1024, num_classes))

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))

class Vgg16Cifar(nn.Module):
    """ddl's vgg16_cifar with torchvision VGG's keys: VGG16's convolutions, a 512-wide classifier."""

    def __init__(self, num_classes, size=32):
        super().__init__()
        layers, channels = [], 3
        for width, convs in ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3)):
            for _ in range(convs):
                layers += [nn.Conv2d(channels, width, 3, padding=1), nn.ReLU(inplace=True)]
                channels = width
            layers.append(nn.MaxPool2d(2, 2))
        self.features = nn.Sequential(*layers)
        side = size // 32
        self.classifier = nn.Sequential(
            nn.Linear(512 * side * side, 512), nn.ReLU(inplace=True), nn.Dropout(0.5),
            nn.Linear(512, 512), nn.ReLU(inplace=True), nn.Dropout(0.5), nn.Linear(512, num_classes))

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


def torch_keys_in_ddl_order(name, model):
    """The module's parameter keys in the order ddl keeps the same parameters."""
    keys = [k for k, _ in model.named_parameters()]
    if name in VIT_SHAPES:  # ddl: patch convolution, class token, position embedding
        keys.remove("class_token")
        keys.insert(keys.index("encoder.pos_embedding"), "class_token")
    return keys


def pair_tensors(name, model, ddl_params, ddl_states):
    """[(ddl name, torch key)] for every parameter and BatchNorm statistic.
    ddl_params: [(name, element count)] in ddl's order; ddl_states: names of ddl's float layer state."""
    tensors = model.state_dict()
    keys = torch_keys_in_ddl_order(name, model)
    if len(keys) != len(ddl_params):
        raise ToolError(f"{name}: ddl has {len(ddl_params)} parameter tensors, the PyTorch module {len(keys)}")
    pairs = []
    for (ddl_name, count), key in zip(ddl_params, keys):
        if tensors[key].numel() != count:
            raise ToolError(f"{name}: ddl's {ddl_name} holds {count} values, PyTorch's {key} "
                               f"{tensors[key].numel()}")
        pairs.append((ddl_name, key))
        layer, _, kind = ddl_name.rpartition(".")
        if kind == "gamma" and f"{layer}.running_mean" in ddl_states:  # a BatchNorm, not a LayerNorm
            module = key.rpartition(".")[0]
            for stat in ("running_mean", "running_var"):
                pairs.append((f"{layer}.{stat}", f"{module}.{stat}"))
    paired_states = {d for d, _ in pairs if d in ddl_states}
    if paired_states != set(ddl_states):
        raise ToolError(f"{name}: ddl's layer state {sorted(set(ddl_states) - paired_states)} has no PyTorch match")
    return pairs


def parse_configuration(text):
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition(" = ")
        if sep:
            values[key] = value
    return values


# ddl's checkpoint file (docs/data-format.md), read and written with h5py.

CHECKPOINT_VERSION = 3
CHUNK_VALUES = 1 << 20  # as core/train/checkpoint.cpp: each chunk checked with Fletcher-32 when read


class Checkpoint:
    def __init__(self, model, configuration, param_names, params, states, class_names=(), input_mean=(),
                 input_std=(), epochs_done=0, steps_done=0, seed=0, best_accuracy=-1.0, graph=b"", graph_names=()):
        self.model, self.configuration = model, configuration
        # A model imported from ONNX: the graph (without the weights this file holds) and, for each ddl
        # name, the graph's name of the same tensor.
        self.graph, self.graph_names = graph, dict(pair.split("=", 1) for pair in graph_names)
        self.param_names, self.params, self.states = list(param_names), params, dict(states)
        self.class_names, self.input_mean, self.input_std = list(class_names), list(input_mean), list(input_std)
        self.epochs_done, self.steps_done, self.seed, self.best_accuracy = epochs_done, steps_done, seed, best_accuracy


def _text(value):
    value = value[0] if getattr(value, "shape", ()) == (1,) else value
    return value.decode() if isinstance(value, bytes) else str(value)


def read_checkpoint(path):
    h5py = need("h5py")
    import numpy
    try:
        with h5py.File(path, "r") as f:
            if _text(f.attrs.get("ddl_format", b"")) != "ddl-checkpoint":
                raise ToolError(f"{path}: not a ddl_train checkpoint")
            states = {}
            f["model_state"].visititems(lambda name, obj: states.__setitem__(name, numpy.asarray(obj))
                                        if isinstance(obj, h5py.Dataset) and obj.dtype == numpy.float32 else None)
            a = f.attrs
            return Checkpoint(
                _text(a["model"]), _text(a["configuration"]), [_text(n) for n in a["param_names"]],
                numpy.asarray(f["params"], dtype=numpy.float32), states,
                [_text(n) for n in a.get("class_names", [])], list(a.get("input_mean", [])),
                list(a.get("input_std", [])), int(a["epochs_done"]), int(a.get("steps_done", 0)), int(a["seed"]),
                float(a["best_accuracy"][0]), numpy.asarray(f["graph"]).tobytes() if "graph" in f else b"",
                [_text(n) for n in a.get("graph_names", [])])
    except OSError as e:  # h5py's word for a missing, foreign or damaged file
        raise ToolError(f"{path}: cannot be read as a ddl checkpoint ({e})")
    except KeyError as e:
        raise ToolError(f"{path}: not a whole ddl checkpoint (no {e})")


def header_checksum(c):
    """core/checksum.hpp's 64-bit checksum over the header, as core/train/checkpoint.cpp computes it."""
    import struct
    h, prime, mask = 0xcbf29ce484222325, 0x100000001b3, (1 << 64) - 1

    def add(data):
        nonlocal h
        whole = len(data) - len(data) % 8
        for i in range(0, whole, 8):
            h = ((h ^ int.from_bytes(data[i:i + 8], "little")) * prime) & mask
        tail = int.from_bytes(data[whole:].ljust(8, b"\0"), "little")
        h = ((h ^ tail ^ ((len(data) << 56) & mask)) * prime) & mask

    def word(n):
        add(struct.pack("<Q", n & mask))  # as uint64, like the C++ (a seed may be stored negative)
    add(c.model.encode())
    word(c.epochs_done)
    word(c.steps_done)
    word(c.seed)
    add(struct.pack("<d", c.best_accuracy))
    add(c.configuration.encode())
    for name in c.param_names:
        add(name.encode())
    word(len(c.class_names))
    for name in c.class_names:
        add(name.encode())
    for values in (c.input_mean, c.input_std):
        word(len(values))
        add(struct.pack(f"<{len(values)}d", *values))
    return h - (1 << 64) if h >= 1 << 63 else h  # stored as int64


def write_checkpoint(path, c):
    """A checkpoint of format 3 with weights and layer state, without optimizer state (it resumes nothing:
    ddl_train --init, ddl_eval and ddl_predict take it)."""
    h5py = need("h5py")
    import numpy

    def strings(values):
        values = [v.encode() for v in values]
        return numpy.array(values, dtype=f"S{max([1] + [len(v) for v in values])}")

    def vector(group, name, values):
        values = numpy.ascontiguousarray(values)
        chunks = dict(chunks=(min(len(values), CHUNK_VALUES),), fletcher32=True) if len(values) else {}
        group.create_dataset(name, data=values, **chunks)

    def write(tmp):
        with h5py.File(tmp, "w", libver=("v110", "v110")) as f:
            a = f.attrs
            a.create("ddl_format", strings(["ddl-checkpoint"]))
            a.create("format_version", numpy.int64(CHECKPOINT_VERSION))
            a.create("model", strings([c.model]))
            a.create("epochs_done", numpy.int64(c.epochs_done))
            a.create("steps_done", numpy.int64(c.steps_done))
            a.create("seed", numpy.int64(c.seed))
            a.create("best_accuracy", numpy.array([c.best_accuracy], dtype=numpy.float64))
            a.create("configuration", strings([c.configuration]))
            if c.class_names:
                a.create("class_names", strings(c.class_names))
            if c.input_mean:
                a.create("input_mean", numpy.array(c.input_mean, dtype=numpy.float64))
                a.create("input_std", numpy.array(c.input_std, dtype=numpy.float64))
            a.create("param_names", strings(c.param_names))
            a.create("header_checksum", numpy.int64(header_checksum(c)))
            vector(f, "params", c.params.astype(numpy.float32))
            states = f.create_group("model_state")
            for name, values in c.states.items():
                vector(states, name, values.astype(numpy.float32))
            f.create_group("optimizer_state")
            f.flush()
            os.fsync(f.id.get_vfd_handle())
    save_atomically(write, path)


def ddl_layout(ddl_data, name, num_classes, settings):
    """ddl's parameters [(name, dims)] and float layer state {name: size} for a model, from `ddl_data model`."""
    import subprocess
    command = [ddl_data, "model", name, "--num-classes", str(num_classes)]
    for key, value in settings.items():
        command += ["--" + key.replace("_", "-"), str(value)]
    try:
        run = subprocess.run(command, capture_output=True, text=True)
    except OSError as e:
        raise ToolError(f"cannot run {ddl_data} ({e.strerror}): build ddl (bash launch/setup.sh) or give --ddl-data")
    if run.returncode != 0:
        raise ToolError(run.stderr.strip().removeprefix("ddl_data: error: "))
    params, states = [], {}
    for line in run.stdout.splitlines():
        kind, _, rest = line.partition(" ")
        fields = rest.split()
        if kind == "param":
            params.append((fields[0], [int(d) for d in fields[1:]]))
        elif kind == "state":
            states[fields[0]] = int(fields[1])
    return params, states


def default_ddl_data():
    """ddl_data on PATH, or in this checkout's build folder."""
    import shutil
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "launch", "ddl_data")
    return shutil.which("ddl_data") or os.path.normpath(here)
