"""launch/export_torch.py, launch/import_torch.py and ddl_train --init against PyTorch and torchvision:
the same weights give the same logits in both, a round trip ddl -> PyTorch -> ddl is bit for bit, and
fine-tuning from imported weights with another class count trains.
    DDL_BIN_DIR=build/launch /usr/bin/python3 tests/launch/torch_interop_test.py
Exits 77 (skipped) when a Python module is missing, unless DDL_TESTS_REQUIRE_ALL=1.
"""
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("DDL_BIN_DIR", os.path.join(ROOT, "build", "launch"))
PYTHON = sys.executable
EXPORT = os.path.join(ROOT, "launch", "export_torch.py")
IMPORT = os.path.join(ROOT, "launch", "import_torch.py")
# The comparison: max |ddl - torch| over every logit at most this fraction of the largest |logit|.
RELATIVE_TOLERANCE = 1e-4

try:
    import h5py  # noqa: F401
    import numpy
    import onnx
    import torch
    from PIL import Image
    sys.path.insert(0, os.path.join(ROOT, "launch"))
    import ddl_torch
except ImportError as e:
    print(f"torch_interop_test: {e}: skipped", file=sys.stderr)
    sys.exit(1 if os.environ.get("DDL_TESTS_REQUIRE_ALL") == "1" else 77)


def run(*command, expect=0):
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True)
    if expect is not None and result.returncode != expect:
        raise AssertionError(f"{' '.join(map(str, command))}: exit {result.returncode}, expected {expect}\n"
                             f"{result.stdout}\n{result.stderr}")
    return result


def write_pngs(h5_path, folder, count, size=None):
    """The first `count` images of a dataset as PNG (lossless: both sides read the same pixels)."""
    os.makedirs(folder, exist_ok=True)
    with h5py.File(h5_path, "r") as f:
        images = numpy.asarray(f["images"][:count])
    for i, image in enumerate(images):
        picture = Image.fromarray(image)
        if size:
            picture = picture.resize((size, size), Image.BILINEAR)
        picture.save(os.path.join(folder, f"{i:02d}.png"))
    return folder


def import_subset(source, output, per_class, classes=None):
    """The first `per_class` images of each class (of the first `classes` classes) as a ddl dataset with 20%
    held out: small, since each epoch validates on every held-out image."""
    folder = output.replace(".h5", "")
    for name in sorted(os.listdir(source))[:classes]:
        os.makedirs(os.path.join(folder, name))
        for image in sorted(os.listdir(os.path.join(source, name)))[:per_class]:
            shutil.copy(os.path.join(source, name, image), os.path.join(folder, name, image))
    run(os.path.join(BIN, "ddl_data"), "import", "--from", folder, "--output", output, "--val-fraction", "0.2",
        "--seed", "1")
    return output


def ddl_logits(checkpoint, images):
    out = run(os.path.join(BIN, "ddl_predict"), "--checkpoint", checkpoint, "--logits", images).stdout
    rows = list(csv.reader(out.splitlines()))[1:]
    return [r[0] for r in rows], numpy.array([[float(v) for v in r[1:]] for r in rows])


def torch_logits(model, paths, mean=(), std=()):
    x = torch.stack([torch.from_numpy(numpy.asarray(Image.open(p).convert("RGB"), dtype=numpy.float32) / 255)
                     .permute(2, 0, 1) for p in paths])
    if mean:
        x = (x - torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1)) / torch.tensor(
            std, dtype=torch.float32).view(1, 3, 1, 1)
    model.eval()
    with torch.no_grad():
        return model(x).double().numpy()


class TorchInterop(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="ddl_torch_")
        run("tar", "xzf", os.path.join(ROOT, "data", "cifar10_sample.tar.gz"), "-C", cls.dir)
        cls.sample = import_subset(os.path.join(cls.dir, "cifar10_sample"), os.path.join(cls.dir, "sample.h5"), 80)
        cls.images = write_pngs(os.path.join(cls.dir, "sample_val.h5"), os.path.join(cls.dir, "png"), 16)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def train(self, model, data, *extra, checkpoint_dir, epochs=1, steps=3):
        return run(os.path.join(BIN, "ddl_train"), "--model", model, "--train", data, "--val",
                   data.replace(".h5", "_val.h5"), "--epochs", epochs, "--steps-per-epoch", steps, "--batch-size",
                   "16", "--threads", "2", "--progress", "never", "--checkpoint-dir", checkpoint_dir, *extra)

    def assert_same_logits(self, ddl, torch_out, what):
        scale = numpy.abs(torch_out).max()
        self.assertGreater(scale, 0, what)
        difference = numpy.abs(ddl - torch_out).max()
        print(f"{what}: max |ddl - torch| {difference:.3g}, largest |logit| {scale:.3g}")
        self.assertLessEqual(difference, RELATIVE_TOLERANCE * scale, what)

    def test_trained_models_export_with_the_same_logits_and_come_back_bit_for_bit(self):
        for model in ("seed_cnn", "seed_cnn_bn", "alexnet_cifar", "vgg16_cifar", "resnet18_cifar", "vit_tiny"):
            with self.subTest(model=model):
                checkpoints = self.path(f"ck_{model}")
                self.train(model, self.sample, checkpoint_dir=checkpoints)
                trained = os.path.join(checkpoints, "last.h5")
                exported, onnx_file = self.path(f"{model}.pt"), self.path(f"{model}.onnx")
                run(PYTHON, EXPORT, trained, exported, "--onnx", onnx_file)
                onnx.checker.check_model(onnx.load(onnx_file))
                net = ddl_torch.torch_model(model, 10)
                net.load_state_dict(torch.load(exported))  # strict: every key, torchvision's names
                paths, ddl = ddl_logits(trained, self.images)
                self.assertEqual(len(paths), 16)
                self.assert_same_logits(ddl, torch_logits(net, paths), model)

                back = self.path(f"{model}_back.h5")
                run(PYTHON, IMPORT, exported, back, "--model", model, "--ddl-data", os.path.join(BIN, "ddl_data"))
                before, after = ddl_torch.read_checkpoint(trained), ddl_torch.read_checkpoint(back)
                self.assertEqual(before.param_names, after.param_names)
                self.assertTrue(numpy.array_equal(before.params.view(numpy.uint32), after.params.view(numpy.uint32)))
                self.assertEqual(sorted(before.states), sorted(after.states))
                for name in before.states:
                    self.assertTrue(numpy.array_equal(before.states[name].view(numpy.uint32),
                                                      after.states[name].view(numpy.uint32)), name)

    def test_torchvision_models_at_full_size_give_ddl_the_same_logits(self):
        image = write_pngs(self.path("sample_val.h5"), self.path("png224"), 1, size=224)
        torch.manual_seed(7)
        for model, tv_name in (("alexnet", "alexnet"), ("resnet50", "resnet50"), ("vit_b16", "vit_b_16")):
            with self.subTest(model=model):
                import torchvision
                net = getattr(torchvision.models, tv_name)(num_classes=1000)
                with torch.no_grad():
                    for name, buffer in net.named_buffers():  # statistics other than the defaults 0 and 1
                        if name.endswith("running_mean"):
                            buffer.normal_(0, 0.1)
                        elif name.endswith("running_var"):
                            buffer.uniform_(0.5, 1.5)
                    if model == "vit_b16":  # torchvision starts its head at zero
                        net.heads.head.weight.normal_(0, 0.02)
                weights, converted = self.path(f"{model}.pt"), self.path(f"{model}.h5")
                torch.save(net.state_dict(), weights)
                run(PYTHON, IMPORT, weights, converted, "--model", model, "--ddl-data", os.path.join(BIN, "ddl_data"))
                paths, ddl = ddl_logits(converted, image)
                expected = torch_logits(net, paths, ddl_torch.IMAGENET_MEAN, ddl_torch.IMAGENET_STD)
                self.assert_same_logits(ddl, expected, model)
                os.remove(converted)

    def test_init_starts_from_the_weights_and_fine_tunes_another_class_count(self):
        trained = os.path.join(self.path("ck_init_source"), "last.h5")
        self.train("resnet18_cifar", self.sample, checkpoint_dir=self.path("ck_init_source"))
        exported, imported = self.path("init.pt"), self.path("init.h5")
        run(PYTHON, EXPORT, trained, exported)
        run(PYTHON, IMPORT, exported, imported, "--model", "resnet18_cifar",
            "--ddl-data", os.path.join(BIN, "ddl_data"))
        # The same classes, a step too small to move any weight but one that is exactly 0 (by less than
        # 1e-25): training starts where --init says.
        out = self.train("resnet18_cifar", self.sample, "--init", imported, "--optimizer", "sgd", "--momentum", "0",
                         "--lr", "1e-30", checkpoint_dir=self.path("ck_same"), steps=1).stdout
        self.assertIn(f"initialised from {imported}\n", out)
        start, after = ddl_torch.read_checkpoint(imported).params, ddl_torch.read_checkpoint(
            os.path.join(self.path("ck_same"), "last.h5")).params
        moved = numpy.abs(start) > 1e-20
        self.assertTrue(numpy.array_equal(start[moved], after[moved]))
        self.assertLess(numpy.abs(after[~moved] - start[~moved]).max(initial=0), 1e-25)

        # Five of the ten classes: the classifier starts afresh, the rest from the weights, and it learns.
        five = import_subset(self.path("cifar10_sample"), self.path("five.h5"), 80, classes=5)
        out = self.train("resnet18_cifar", five, "--init", imported, checkpoint_dir=self.path("ck_five"),
                         epochs=3, steps=5).stdout
        self.assertIn("11.weight, 11.bias start afresh (its classifier is for 10 classes, this run's for 5)", out)
        losses = [float(line.split("train loss ")[1].split()[0]) for line in out.splitlines()
                  if line.startswith("epoch ")]
        self.assertEqual(len(losses), 3, out)
        self.assertLess(losses[-1], losses[0], out)
        self.assertEqual(ddl_torch.read_checkpoint(os.path.join(self.path("ck_five"), "last.h5")).params.size,
                         ddl_torch.read_checkpoint(imported).params.size - 5 * 512 - 5)

    def test_bad_input_gets_one_line_and_exit_2(self):
        weights = self.path("bad_resnet18.pt")
        torch.save(ddl_torch.torch_model("resnet18_cifar", 10).state_dict(), weights)
        ddl_data = os.path.join(BIN, "ddl_data")
        cases = [
            ((EXPORT, self.sample, self.path("x.pt")), "not a ddl_train checkpoint"),
            ((EXPORT, self.path("missing.h5"), self.path("x.pt")), "missing.h5"),
            ((IMPORT, weights, self.path("x.h5"), "--model", "resnet50_cifar", "--ddl-data", ddl_data),
             "not the weights of resnet50_cifar"),
            ((IMPORT, self.sample, self.path("x.h5"), "--model", "resnet18_cifar", "--ddl-data", ddl_data),
             "cannot be read by torch.load"),
            ((IMPORT, weights, self.path("x.h5"), "--model", "resnet99"), "is not one of ddl's"),
        ]
        for command, message in cases:
            with self.subTest(command=command[0:2]):
                result = run(PYTHON, *command, expect=2)
                lines = result.stderr.strip().splitlines()
                self.assertEqual(len(lines), 1, result.stderr)
                self.assertIn(message, lines[0])
        # A missing Python module is named with its Debian package.
        hide_onnx = ("import os, sys, runpy; sys.modules['onnx'] = None; sys.argv = sys.argv[1:]; "
                     "sys.path.insert(0, os.path.dirname(sys.argv[0])); runpy.run_path(sys.argv[0], run_name='__main__')")
        checkpoint = os.path.join(self.path("ck_missing"), "last.h5")
        self.train("seed_cnn", self.sample, checkpoint_dir=self.path("ck_missing"))
        result = run(PYTHON, "-c", hide_onnx, EXPORT, checkpoint, self.path("y.pt"), "--onnx", self.path("y.onnx"),
                     expect=2)
        self.assertIn("install Debian's python3-onnx", result.stderr)
        self.assertFalse(os.path.exists(self.path("y.onnx")))


if __name__ == "__main__":
    unittest.main(verbosity=2)
