"""launch/export_onnx.py: a user's module, exported as ddl needs it and checked by ddl_train --plan-only; the
file keeps the module's names and values and trains; a graph ddl cannot build, and bad input, end in one line
and exit 2.
    DDL_BIN_DIR=build/launch /usr/bin/python3 tests/launch/export_onnx_test.py
Exits 77 (skipped) when a Python module is missing, unless DDL_TESTS_REQUIRE_ALL=1.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("DDL_BIN_DIR", os.path.join(ROOT, "build", "launch"))
EXPORT = os.path.join(ROOT, "launch", "export_onnx.py")

try:
    import h5py
    import numpy
    import onnx
    from PIL import Image
    import torch
    import torchvision  # noqa: F401 (ddl_torch's, which would end the test rather than skip it)
    from onnx import numpy_helper
except ImportError as e:
    print(f"export_onnx_test: {e}: skipped", file=sys.stderr)
    sys.exit(1 if os.environ.get("DDL_TESTS_REQUIRE_ALL") == "1" else 77)

# The user's file, with an import of its own from its folder (helpers.py).
HELPERS = "WIDTH = 8\n"
NETS = '''
import torch
import torchvision
from torch import nn
from helpers import WIDTH


class SmallCnn(nn.Module):
    def __init__(self, classes=10, width=WIDTH):
        super().__init__()
        self.conv = nn.Conv2d(3, width, 3, padding=1)
        self.bn = nn.BatchNorm2d(width)
        with torch.no_grad():  # statistics of a trained module, which the file must keep as they are
            self.bn.running_mean.fill_(0.25)
            self.bn.running_var.fill_(2.0)
        self.drop = nn.Dropout(0.2)
        self.fc = nn.Linear(width * 16 * 16, classes)

    def forward(self, x):
        x = nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.fc(self.drop(torch.flatten(x, 1)))


class Deep(nn.Module):  # residual blocks with torchvision's stochastic depth, as its ConvNeXt and Swin have; nn.Dropout2d
    def __init__(self, p=0.25):
        super().__init__()
        torch.manual_seed(0)  # the same weights at any p: runs apart by the masks alone
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.body = nn.Conv2d(8, 8, 3, padding=1)
        self.drop_row = torchvision.ops.StochasticDepth(p, "row")
        self.drop_batch = torchvision.ops.StochasticDepth(p, "batch")
        self.drop_channels = nn.Dropout2d(p)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        x = self.drop_channels(torch.relu(self.stem(x)))
        x = x + self.drop_row(torch.relu(self.body(x)))
        x = x + self.drop_batch(torch.relu(self.body(x)))
        return self.fc(x.mean([2, 3]))


class Cosine(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3 * 32 * 32, 10)

    def forward(self, x):
        return self.fc(torch.flatten(torch.cos(x), 1))
'''


def run(*command, expect=0):
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True)
    if expect is not None and result.returncode != expect:
        raise AssertionError(f"{' '.join(map(str, command))}: exit {result.returncode}, expected {expect}\n"
                             f"{result.stdout}\n{result.stderr}")
    return result


def export(*options, expect=0):
    return run(sys.executable, EXPORT, *options, expect=expect)


class ExportOnnx(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        for variable in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"):  # mpirun as root (CI)
            os.environ.setdefault(variable, "1")
        os.environ["DDL_BIN_DIR"] = BIN  # export_onnx.py checks with these programs
        cls.dir = tempfile.mkdtemp(prefix="ddl_export_onnx_")
        with open(os.path.join(cls.dir, "helpers.py"), "w") as f:
            f.write(HELPERS)
        cls.nets = os.path.join(cls.dir, "nets.py")
        with open(cls.nets, "w") as f:
            f.write(NETS)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def images(self):
        """A dataset of 4 random 32x32 images in 2 classes, made once."""
        data = self.path("images.h5")
        if not os.path.exists(data):
            images = self.path("images")
            for label in ("a", "b"):
                os.makedirs(os.path.join(images, label))
                for i in range(2):
                    pixels = torch.randint(0, 256, (32, 32, 3), dtype=torch.uint8)
                    Image.fromarray(pixels.numpy()).save(os.path.join(images, label, f"{i}.png"))
            run(os.path.join(BIN, "ddl_data"), "import", "--from", images, "--output", data)
        return data

    def test_a_cnn_exports_with_its_names_and_statistics_and_trains(self):
        onnx_file = self.path("cnn.onnx")
        out = export("--module", f"{self.nets}:SmallCnn", "--input", "3x32x32", "--output", onnx_file)
        self.assertEqual(out.stdout.count("\n"), 1, out.stdout)
        self.assertIn(f"{onnx_file} is ready", out.stdout)
        self.assertIn(f"--model {onnx_file}", out.stdout)
        graph = onnx.load(onnx_file)
        initializers = {t.name: numpy_helper.to_array(t) for t in graph.graph.initializer}
        self.assertEqual(sorted(initializers), sorted(["conv.weight", "conv.bias", "bn.weight", "bn.bias",
                                                       "bn.running_mean", "bn.running_var", "fc.weight", "fc.bias"]))
        # The statistics as the module had them, not a traced step later (0.9 x 2.0 + 0.1 x the batch's).
        numpy.testing.assert_array_equal(initializers["bn.running_mean"], numpy.full(8, 0.25, numpy.float32))
        numpy.testing.assert_array_equal(initializers["bn.running_var"], numpy.full(8, 2.0, numpy.float32))
        ops = [n.op_type for n in graph.graph.node]
        self.assertIn("BatchNormalization", ops)
        self.assertIn("Dropout", ops)
        self.assertEqual(graph.opset_import[0].version, 17)
        self.assertEqual([i.name for i in graph.graph.input if i.name not in initializers], ["images"])
        self.assertEqual([o.name for o in graph.graph.output], ["logits"])
        self.assertFalse(os.path.exists(onnx_file + ".tmp"))

        # One step of training on images of its own size.
        checkpoints = self.path("cnn.ck")
        run(os.path.join(BIN, "ddl_train"), "--model", onnx_file, "--train", self.images(), "--num-classes", 10, "--epochs", 1,
            "--steps-per-epoch", 1, "--batch-size", 4, "--threads", 1, "--progress", "never", "--checkpoint-dir",
            checkpoints)
        self.assertTrue(os.path.exists(os.path.join(checkpoints, "last.h5")))

    def test_stochastic_depth_exports_and_draws_its_masks_in_ddl(self):
        """torchvision's StochasticDepth (PyTorch 1.13 cannot export its Bernoulli in training mode) is exported as
        a dropout of one number a row, or one for the batch, and nn.Dropout2d (its feature dropout neither) as one of one
        number an image and channel: a mask per step, kept with 1 - p, scaled by 1 / (1 - p)."""
        onnx_file = self.path("deep.onnx")
        export("--module", f"{self.nets}:Deep", "--input", "3x32x32", "--output", onnx_file)
        graph = onnx.load(onnx_file).graph
        dropouts = [n for n in graph.node if n.op_type == "Dropout"]
        self.assertEqual(len(dropouts), 3)
        ratios = {numpy_helper.to_array(t).item() for t in graph.initializer if t.name in {n.input[1] for n in dropouts}}
        ratios |= {numpy_helper.to_array(n.attribute[0].t).item() for n in graph.node
                   if n.op_type == "Constant" and n.output[0] in {d.input[1] for d in dropouts}}
        self.assertEqual(ratios, {0.25})
        # ddl trains it with the masks drawn: the same run at p = 0 ends elsewhere.
        data = self.images()
        finals = []
        for p, name in ((0.25, "deep"), (0.0, "kept")):
            path = self.path(f"{name}.onnx")
            if p == 0.0:
                export("--module", f"{self.nets}:Deep", "--args", '{"p": 0.0}', "--input", "3x32x32", "--output", path)
            run(os.path.join(BIN, "ddl_train"), "--model", path, "--train", data, "--num-classes", 10, "--epochs", 2,
                "--batch-size", 4, "--threads", 1, "--progress", "never", "--seed", 3, "--checkpoint-dir",
                self.path(f"{name}.ck"))
            with h5py.File(self.path(f"{name}.ck/last.h5"), "r") as f:
                finals.append(numpy.asarray(f["params"]))
        self.assertGreater(numpy.abs(finals[0] - finals[1]).max(), 1e-5)

    def test_args_are_the_constructors_keyword_arguments(self):
        onnx_file = self.path("args.onnx")
        export("--module", f"{self.nets}:SmallCnn", "--args", '{"classes": 7, "width": 4}', "--input", "3x32x32",
               "--output", onnx_file, "--opset", 13)
        graph = onnx.load(onnx_file)
        dims = {t.name: list(t.dims) for t in graph.graph.initializer}
        self.assertEqual(dims["conv.weight"], [4, 3, 3, 3])
        self.assertEqual(dims["fc.weight"], [7, 4 * 16 * 16])
        self.assertEqual(graph.graph.output[0].type.tensor_type.shape.dim[1].dim_value, 7)
        self.assertEqual(graph.opset_import[0].version, 13)

    def test_an_operator_ddl_lacks_is_refused_in_one_line(self):
        result = export("--module", f"{self.nets}:Cosine", "--input", "3x32x32", "--output", self.path("cos.onnx"),
                        expect=2)
        lines = result.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, result.stderr)
        self.assertIn("Cos node", lines[0])
        self.assertIn("ddl does not support this operator", lines[0])
        self.assertEqual(result.stdout, "")

    def test_bad_input_ends_in_one_line(self):
        output = self.path("bad.onnx")
        for options, message in (
                (["--module", self.path("missing.py") + ":SmallCnn", "--input", "3x32x32"], "there is no file"),
                (["--module", f"{self.nets}:Missing", "--input", "3x32x32"], "has no class Missing"),
                (["--module", f"{self.nets}:SmallCnn", "--input", "3x224"], "--input 3x224"),
                (["--module", f"{self.nets}:SmallCnn", "--input", "3x32x32", "--args", "{classes: 7}"],
                 "--args is not JSON"),
                (["--module", f"{self.nets}:SmallCnn", "--input", "3x32x32", "--args", '{"depth": 3}'],
                 "unexpected keyword argument 'depth'"),
                (["--module", f"{self.nets}:SmallCnn", "--input", "3x64x64"], "did not export at input 3x64x64"),
                (["--module", f"{self.nets}:SmallCnn", "--input", "3x32x32", "--opset", 18], "--opset 18")):
            with self.subTest(options=options):
                result = export(*options, "--output", output, expect=2)
                lines = result.stderr.strip().splitlines()
                self.assertEqual(len(lines), 1, result.stderr)
                self.assertIn(message, lines[0])
                self.assertFalse(os.path.exists(output))


if __name__ == "__main__":
    unittest.main(verbosity=2)
