"""ddl_train --model FILE.onnx against PyTorch: networks exported by torch.onnx.export train in ddl as in
PyTorch (a few steps of full-batch SGD from the same weights: every parameter and BatchNorm statistic within
1e-3 of the tensor's largest value), and a graph ddl cannot build is refused in one line. LARS and LAMB the
same way, against references written here from their papers' formulas.
    DDL_BIN_DIR=build/launch /usr/bin/python3 tests/launch/onnx_import_test.py
Exits 77 (skipped) when a Python module is missing, unless DDL_TESTS_REQUIRE_ALL=1.
"""
import copy
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("DDL_BIN_DIR", os.path.join(ROOT, "build", "launch"))
SAMPLE_SCRIPT = os.path.join(ROOT, "data", "models", "export_sample.py")
SAMPLE = os.path.join(ROOT, "data", "models", "se_resnet_sample.onnx")
EXPORT = os.path.join(ROOT, "launch", "export_torch.py")
# Every parameter and statistic after the steps: |ddl - torch| at most this fraction of the tensor's largest |value|.
TOLERANCE = 1e-3
F32_SPREAD = 20
F32_CAP = 2e-2  # and never more than this

try:
    import h5py
    import numpy
    import torch
    import torchvision  # noqa: F401 (ddl_torch's, which would end the test rather than skip it)
    from torch import nn
except ImportError as e:
    print(f"onnx_import_test: {e}: skipped", file=sys.stderr)
    sys.exit(1 if os.environ.get("DDL_TESTS_REQUIRE_ALL") == "1" else 77)
sys.path.insert(0, os.path.join(ROOT, "launch"))
import ddl_torch  # noqa: E402 (after the check above)


def run(*command, expect=0):
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True)
    if expect is not None and result.returncode != expect:
        raise AssertionError(f"{' '.join(map(str, command))}: exit {result.returncode}, expected {expect}\n"
                             f"{result.stdout}\n{result.stderr}")
    return result


class Residual(nn.Module):
    """A basic block as torchvision's ResNet has it, with a 1x1 projection where the shape changes."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class SmallResNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2))
        self.blocks = nn.Sequential(Residual(8, 8, 1), Residual(8, 16, 2))
        self.head = nn.Linear(16 * 4, classes)

    def forward(self, x):
        x = nn.functional.avg_pool2d(self.blocks(self.stem(x)), 4)  # 8x8 -> 2x2
        return self.head(x.view(x.size(0), -1))


# Networks as labs write them, on operators ddl runs in pieces of its graph layer (core/graph/).
F = nn.functional
class GroupNormNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1); self.g1 = nn.GroupNorm(2, 8)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1); self.i2 = nn.InstanceNorm2d(8, affine=True)
        self.fc = nn.Linear(8, 10)
    def forward(self, x):
        x = F.relu(self.g1(self.c1(x)))
        x = F.relu(self.i2(self.c2(x)))
        return self.fc(x.mean([2, 3]))


class UpsampleNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.c2 = nn.Conv2d(4, 4, 3, padding=1)
        self.fc = nn.Linear(4, 10)
    def forward(self, x):
        y = self.up(F.elu(self.c1(x)))
        y = F.interpolate(self.c2(y), scale_factor=0.5, mode="bilinear", align_corners=False)
        return self.fc(F.softplus(y).sum([2, 3]) / 64)


class CBAM(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.mlp = nn.Sequential(nn.Conv2d(8, 2, 1), nn.ReLU(), nn.Conv2d(2, 8, 1))
        self.sa = nn.Sequential(nn.Conv2d(2, 1, 7, padding=3, bias=False), nn.BatchNorm2d(1))  # CBAM's BasicConv
        self.fc = nn.Linear(8, 10)
    def forward(self, x):
        x = F.relu(self.c1(x))
        a = self.mlp(F.adaptive_avg_pool2d(x, 1)) + self.mlp(F.adaptive_max_pool2d(x, 1))
        x = x * torch.sigmoid(a)
        m = torch.cat([x.mean(1, keepdim=True), x.amax(1, keepdim=True)], 1)
        x = x * torch.sigmoid(self.sa(m))
        return self.fc(x.mean([2, 3]))


class AttentionGate(nn.Module):  # Attention U-Net's gate: the skip features cross every cut between its convolutions
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.down = nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.up = nn.Conv2d(8, 8, 3, padding=1)
        self.ws = nn.Conv2d(8, 8, 1)
        self.psi = nn.Conv2d(8, 1, 1)
        self.fc = nn.Linear(8, 10)
    def forward(self, x):
        s = F.relu(self.c1(x))
        g = F.interpolate(self.up(F.relu(self.down(s))), scale_factor=2.0)
        a = torch.sigmoid(self.psi(F.relu(self.ws(s) + g)))
        return self.fc((s * a).mean([2, 3]))


class BiasAddedLater(nn.Module):  # x @ W^T, another node, then + b: one product with its bias, never cut apart
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.w1, self.w2 = nn.Parameter(torch.randn(8, 8) * 0.3), nn.Parameter(torch.randn(8, 8) * 0.3)
        self.b1 = nn.Parameter(torch.full((8,), 0.1))
        self.fc = nn.Linear(8, 10)
    def forward(self, x):
        t = F.relu(self.c1(x)).flatten(2).transpose(1, 2)  # [N, 256 tokens, 8]
        y = t @ self.w1.t()
        s = torch.sigmoid(t)
        y = y + self.b1
        return self.fc(((y @ self.w2.t()) * s).mean(1))


class SharedExponent(nn.Module):  # GeM pooling: one trained p read before and after the pooling layer
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.p = nn.Parameter(torch.full((1,), 3.0))
        self.fc = nn.Linear(8, 10)
    def forward(self, x):
        x = F.relu(self.c1(x)) + 1e-3
        return self.fc(F.adaptive_avg_pool2d(x.pow(self.p), 1).pow(1.0 / self.p).flatten(1))


class ScalarsAndHalves(nn.Module):  # real-number bounds exported as DOUBLE, 1 - g, rsqrt, F.glu, a 1-d pool
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.gate = nn.Conv2d(8, 8, 1)
        self.fc = nn.Linear(8, 10)
    def forward(self, x):
        x = F.glu(self.c1(x), dim=1).clamp(min=-0.5)  # [N, 8, 16, 16]
        g = torch.sigmoid(self.gate(x))
        x = F.relu(x) * g + x * (1 - g)
        x = x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + 1e-5)
        return self.fc(F.normalize(nn.AdaptiveAvgPool1d(1)(x.flatten(2)).squeeze(-1), dim=1))


class PyramidAndShuffle(nn.Module):  # FPN's F.interpolate to a size; PixelUnshuffle and PixelShuffle; nn.Unfold
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(12, 16, 3, padding=1)  # after PixelUnshuffle(2): [N, 12, 16, 16]
        self.c2 = nn.Conv2d(16, 16, 3, stride=2, padding=1)
        self.lateral = nn.Conv2d(16, 16, 1)
        self.c3 = nn.Conv2d(4, 8, 3, stride=2, padding=1)  # after PixelShuffle(2): [N, 4, 32, 32]
        self.embed = nn.Linear(8 * 4, 10)  # nn.Unfold(2, stride=2) of [N, 8, 16, 16]: [N, 32, 64]
    def forward(self, x):
        c1 = F.relu(self.c1(F.pixel_unshuffle(x, 2)))
        c2 = F.relu(self.c2(c1))
        p1 = self.lateral(c1) + F.interpolate(c2, size=c1.shape[-2:], mode="bilinear", align_corners=False)
        y = F.relu(self.c3(F.pixel_shuffle(p1, 2)))
        return self.embed(F.unfold(y, 2, stride=2).transpose(1, 2)).mean(1)


class FlipsAndKernelMixes(nn.Module):  # torch.flip, x.std, dynamic convolution by einsum, an einsum head + bias
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.att = nn.Linear(8, 3)
        self.convs = nn.Conv2d(8, 24, 3, padding=1)
        self.w = nn.Parameter(torch.randn(10, 8, 8) * 0.1)
        self.b = nn.Parameter(torch.full((10,), 0.1))
    def forward(self, x):
        y = self.c1(x)  # no ReLU before the std: where every channel is 0, its gradient is 0 / 0 (NaN in PyTorch too)
        y = y + torch.flip(y, dims=[3])
        y = (y - y.mean(1, keepdim=True)) / (y.std(1, keepdim=True) + 1e-3)
        n, c, h, w = y.shape
        a = F.softmax(self.att(y.mean([2, 3])), -1)
        y = torch.einsum("nk,nkchw->nchw", a, self.convs(y).view(n, 3, c, h, w))
        return torch.einsum("ni,oij,nj->no", y.mean([2, 3]), self.w, y.amax([2, 3])) + self.b


class SkipUNet(nn.Module):
    """An encoder-decoder whose skip connections hold most of its convolutions, one summed and one concatenated:
    blocks ddl opens into its chain (open_block.hpp), so that a pipeline may cut inside them."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.down1 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.down2 = nn.Conv2d(16, 16, 3, stride=2, padding=1)
        self.up2 = nn.ConvTranspose2d(16, 16, 2, stride=2)
        self.up1 = nn.Conv2d(16, 8, 3, padding=1)
        self.fuse = nn.Conv2d(16, 8, 1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        x1 = F.relu(self.stem(x))
        x2 = F.relu(self.down1(x1))
        y = F.relu(self.up2(F.relu(self.down2(x2))) + x2)
        y = F.interpolate(self.up1(y), scale_factor=2, mode="nearest")
        return self.fc(self.fuse(torch.cat([y, x1], 1)).mean([2, 3]))


class SharedConvolution(nn.Module):
    """One convolution's weight read again three layers on (b.weight = a.weight): a pipeline must not cut
    between them."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.a = nn.Conv2d(8, 8, 3, padding=1)
        self.mid = nn.Conv2d(8, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 8, 3, padding=1)
        self.b.weight = self.a.weight
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        x = F.relu(self.stem(x))
        x = F.relu(self.b(F.relu(self.mid(F.relu(self.a(x))))))
        return self.fc(x.mean([2, 3]))


class PadsAndNorms(nn.Module):  # reflected and replicated borders; a BatchNorm1d over tokens inside a piece
    def __init__(self):
        super().__init__()
        self.c1 = nn.Sequential(nn.ReflectionPad2d(1), nn.Conv2d(3, 6, 3, stride=2))
        self.c2 = nn.Sequential(nn.ReplicationPad2d((1, 2, 0, 1)), nn.Conv2d(6, 6, (2, 4)))
        self.bn = nn.BatchNorm1d(6)
        self.fc = nn.Linear(6, 10)
    def forward(self, x):
        t = F.relu(self.c2(F.relu(self.c1(x)))).flatten(2)  # [N, 6, 256]
        w = torch.softmax(self.bn(t), 1)  # over the channels: along the tokens its bias would cancel
        return self.fc((w * t).sum(-1))


class Decoder(nn.Module):  # transposed convolutions: output_padding, groups and dilation, a BatchNorm after one
    def __init__(self):
        super().__init__()
        self.down = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.up1 = nn.ConvTranspose2d(8, 8, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.bn = nn.BatchNorm2d(8)
        self.up2 = nn.ConvTranspose2d(8, 4, (2, 3), dilation=(1, 2), padding=(0, 2))
        self.fc = nn.Linear(4, 10)
    def forward(self, x):
        y = F.relu(self.bn(self.up1(F.relu(self.down(x)))))
        return self.fc(self.up2(y).mean([2, 3]))


class ScansAndMasks(nn.Module):  # a comparison feeding Where, a .bool() mask, CumSum, Trilu, % and torch.fmod
    def __init__(self, classes=10):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.fc = nn.Linear(8 * 4 + 8, classes)

    def forward(self, x):
        h = F.max_pool2d(self.c1(x), 2)
        m = h.mean(1, keepdim=True)                           # Greater broadcasts it
        h = torch.where(h > m, h, 0.5 * h + 0.5 * m)          # continuous where h == m
        h = h * F.relu(h).sum(1, keepdim=True).bool()         # Cast to bool of image values: a mask
        h = torch.cumsum(h, dim=3) / 16
        h = torch.triu(self.c2(h), diagonal=1)
        f = F.avg_pool2d(h, 4).flatten(1)
        g = h.mean([2, 3])
        g = g + 0.5 * (g % 0.25) + 0.5 * torch.fmod(g, -0.3)  # Div/Floor/Mul/Sub; Mod fmod 1
        return self.fc(torch.cat([f, g], 1))


class CodebookAndBilinear(nn.Module):  # a codebook at each token's nearest entry (ArgMin, Gather); a 3-operand einsum
    def __init__(self, classes=10):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, stride=4, padding=1)
        self.codebook = nn.Parameter(torch.randn(16, 8))
        self.u = nn.Parameter(torch.randn(8, 8) / 4)
        self.fc = nn.Linear(8, classes)

    def forward(self, x):
        h = self.c1(x).flatten(2).transpose(1, 2)                   # [N, 64, 8]
        d = (h.unsqueeze(2) - self.codebook).pow(2).sum(-1)        # [N, 64, 16]
        h = h + self.codebook[d.argmin(-1)]                        # Gather at computed indices
        m = torch.einsum("nti,ij,nsj->nts", h, self.u, h) / 8      # [N, 64, 64]
        return self.fc(torch.softmax(m, -1).bmm(h).mean(1))


class Activations(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 6, (5, 3), padding=(2, 1))
        self.p = nn.PReLU(6)
        self.fc = nn.Linear(6 * 4, 10)
    def forward(self, x):
        x = self.p(self.c1(x))
        x = F.selu(x) + F.mish(x) + F.softsign(x) + F.celu(x) + F.gelu(x)
        x = F.max_pool2d(x, (4, 2))
        x = torch.tanh(x).amax(3)  # [N, 6, 8]
        x = F.adaptive_avg_pool1d(x, 4)
        return F.log_softmax(self.fc(x.flatten(1)), 1)


class AttnPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 4, stride=4)
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.fc = nn.Linear(16, 10)
    def forward(self, x):
        t = self.c1(x).flatten(2).transpose(1, 2)
        y, _ = self.attn(t, t, t)
        return self.fc(y.mean(1))


class DroppedAttention(nn.Module):
    """Dropout where torchvision's transformers have it: on attention's weights (inside a piece) and before
    the classifier (a layer of its own), both at p > 0."""
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 4, stride=4)
        self.attn = nn.MultiheadAttention(16, 2, dropout=0.3, batch_first=True)
        self.drop = nn.Dropout(0.4)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        t = self.c1(x).flatten(2).transpose(1, 2)
        y, _ = self.attn(t, t, t)
        return self.fc(self.drop(y.mean(1)))


class Bn1dHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.BatchNorm2d(8)
        self.fc1 = nn.Linear(8, 32)
        self.bn = nn.BatchNorm1d(32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = F.relu(self.b(self.c1(x))).mean([2, 3])
        return self.fc2(F.relu(self.bn(self.fc1(x))))


class ConcatOfRows(nn.Module):  # paths joined along the image's rows, in a piece
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 2, 1), nn.Conv2d(3, 2, 1)
        self.fc = nn.Linear(2 * 64 * 32, 10)

    def forward(self, x):
        return self.fc(torch.flatten(torch.cat([self.a(x), self.b(x)], 2), 1))


class HalfTheRowsConvolved(nn.Module):  # a Slice of rows and a Conv in one piece
    def __init__(self):
        super().__init__()
        self.stem, self.conv = nn.Conv2d(3, 4, 1), nn.Conv2d(4, 4, 1)
        self.fc = nn.Linear(8 * 16 * 32, 10)

    def forward(self, x):
        x = self.stem(x)
        return self.fc(torch.flatten(torch.cat([x[:, :, :16], self.conv(x[:, :, 16:])], 1), 1))


def randomize_batch_norms(model):
    """BatchNorm's scale, shift and statistics away from 1 and 0: the test then sees that ddl starts from
    the file's values, and the shifts are not sums that cancel to near zero, whose relative error a single
    ReLU flipped by rounding (a value within 1e-7 of 0) would dominate."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.2)
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return model


def without_batch_norms(model):
    """The model with its BatchNorms taken out (identities)."""
    for name, child in model.named_children():
        setattr(model, name, nn.Identity()) if isinstance(child, nn.BatchNorm2d) else without_batch_norms(child)
    return model


class EfficientNetLike(nn.Module):
    """SiLU (x * sigmoid(x), a gate of a factor an element), a grouped dilated convolution, max pooling in
    ceil_mode and x.mean([2, 3]) (ReduceMean) before the classifier."""

    def __init__(self, classes=10):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.SiLU(),
                                      nn.MaxPool2d(3, 2, ceil_mode=True),
                                      nn.Conv2d(16, 32, 3, 1, 2, dilation=2, groups=4), nn.SiLU())
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        return self.head(self.features(x).mean([2, 3]))


class InceptionLike(nn.Module):
    """GoogLeNet's inception module: four paths from one value, concatenated, then a classifier."""

    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU())
        self.a = nn.Conv2d(16, 8, 1)
        self.b = nn.Sequential(nn.Conv2d(16, 8, 1), nn.ReLU(), nn.Conv2d(8, 12, 3, padding=1))
        self.c = nn.Sequential(nn.Conv2d(16, 4, 1), nn.ReLU(), nn.Conv2d(4, 6, 5, padding=2))
        self.d = nn.Sequential(nn.MaxPool2d(3, 1, 1), nn.Conv2d(16, 6, 1))
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(torch.cat([self.a(x), self.b(x), self.c(x), self.d(x)], 1))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class SplitsAndSqueezes(nn.Module):
    """x.split between convolutions (a Split into channel slices, not whole blocks of 16), then rows.unbind(2)
    (a Split and Squeezes), an Unsqueeze and a Squeeze in a piece."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.left, self.right = nn.Conv2d(6, 6, 3, padding=1), nn.Conv2d(10, 10, 1)
        self.pool = nn.MaxPool2d(4)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        left, right = torch.relu(self.conv(x)).split([6, 10], dim=1)
        rows = self.pool(torch.cat([self.left(left), self.right(right)], 1)).mean(3)  # [N, 16, 8]
        parts = rows.unbind(2)
        return self.fc(parts[0] * parts[7] + parts[3].unsqueeze(2).squeeze(2))


class Paddings(nn.Module):
    """F.pad before each convolution, on one side or unevenly, then F.pad with a value and nn.ZeroPad2d."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv1, self.conv2, self.conv3 = nn.Conv2d(3, 16, 3, stride=2), nn.Conv2d(16, 16, 4), nn.Conv2d(16, 16, 2)
        self.pad4, self.conv4 = nn.ZeroPad2d((2, 0, 1, 1)), nn.Conv2d(16, 8, 3)
        self.fc = nn.Linear(8 * 4 * 4, classes)  # pooled, not averaged: a shifted image gives other values

    def forward(self, x):
        x = torch.relu(self.conv1(nn.functional.pad(x, (0, 1, 0, 1))))
        x = torch.relu(self.conv2(nn.functional.pad(x, (1, 2, 1, 2))))
        x = torch.relu(self.conv3(nn.functional.pad(x, (1, 0, 1, 0))))
        x = self.conv4(self.pad4(nn.functional.pad(x, (1, 1, 0, 0), value=0.25)))  # [N, 8, 16, 18]
        return self.fc(nn.functional.max_pool2d(x, 4).flatten(1))


def pads_into_convs(path, paddings):
    """Rewrites the graph at PATH: the first Pads that feed a Conv go into it, in turn as `paddings` gives
    them: a list of [top, left, bottom, right] (the Conv's pads, uneven) or an auto_pad ("SAME_UPPER", ...).
    The padding must be what the Pad gave, so that the module still computes the same."""
    import onnx
    model = onnx.load(path)
    nodes = list(model.graph.node)
    for padding in paddings:
        pad = next(n for n in nodes if n.op_type == "Pad" and
                   [m.op_type for m in nodes if n.output[0] in m.input] == ["Conv"])
        conv = next(m for m in nodes if pad.output[0] in m.input)
        conv.input[0] = pad.input[0]
        kept = [a for a in conv.attribute if a.name != "pads"]
        del conv.attribute[:]
        conv.attribute.extend(kept)
        if isinstance(padding, str):
            conv.attribute.append(onnx.helper.make_attribute("auto_pad", padding))
        else:
            conv.attribute.append(onnx.helper.make_attribute("pads", padding))
        nodes.remove(pad)
        model.graph.node.remove(pad)
    onnx.save(model, path)


class SmallCnn(nn.Module):
    """seed_cnn's shape, without BatchNorm: ranks then sum exactly what one rank sums over the global batch."""

    def __init__(self, classes=10):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Linear(32 * 8 * 8, 64), nn.ReLU(), nn.Linear(64, classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


class Lars(torch.optim.Optimizer):
    """You, Gitman and Ginsburg 2017, Algorithm 1: v = m v + lr local (g + wd w); w -= v, where
    local = eta ||w|| / (||g|| + wd ||w||) for weights, 1 (and no decay) for 1-D arrays (biases, BatchNorm)."""
    def __init__(self, params, lr, momentum, weight_decay, eta):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, eta=eta))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for w in group["params"]:
                g, wd = w.grad, group["weight_decay"] if w.dim() > 1 else 0.0
                local = 1.0
                if w.dim() > 1 and w.norm() > 0 and g.norm() > 0:
                    local = group["eta"] * w.norm() / (g.norm() + wd * w.norm())
                v = self.state[w].setdefault("v", torch.zeros_like(w))
                v.mul_(group["momentum"]).add_(group["lr"] * local * (g + wd * w))
                w.sub_(v)


class Lamb(torch.optim.Optimizer):
    """You et al. 2020, Algorithm 2 with Adam's bias correction: u = m_hat / (sqrt(v_hat) + eps) + wd w;
    w -= lr (||w|| / ||u||) u for weights; 1-D arrays (biases, BatchNorm) take u without decay or ratio."""
    def __init__(self, params, lr, betas, eps, weight_decay):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            (b1, b2), wd = group["betas"], group["weight_decay"]
            for w in group["params"]:
                state = self.state[w]
                if not state:
                    state.update(t=0, m=torch.zeros_like(w), v=torch.zeros_like(w))
                state["t"] += 1
                t, m, v, g = state["t"], state["m"], state["v"], w.grad
                m.mul_(b1).add_((1 - b1) * g)
                v.mul_(b2).add_((1 - b2) * g * g)
                u = (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + group["eps"])
                ratio = 1.0
                if w.dim() > 1:
                    u = u + wd * w
                    if w.norm() > 0 and u.norm() > 0:
                        ratio = w.norm() / u.norm()
                w.sub_(group["lr"] * ratio * u)


# An optimizer as ddl_train's options and as the PyTorch optimizer that does the same, from the parameters.
SGD = (["--optimizer", "sgd", "--momentum", 0], lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0))


def export(model, path, opset, size=32):
    model.train()
    torch.onnx.export(model, torch.zeros(2, 3, size, size), path, opset_version=opset,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=["images"], output_names=["logits"],
                      dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}}, **ddl_torch.torchscript_exporter())


def weights_beside(path):
    """The file rewritten with its weights in a second file beside it (ONNX's external data)."""
    import onnx
    model = onnx.load(path)
    onnx.save(model, path, save_as_external_data=True, location=os.path.basename(path) + ".data", size_threshold=0)


def ddl_tensors(checkpoint):
    """The checkpoint's parameters and BatchNorm statistics by the graph's names."""
    with h5py.File(checkpoint, "r") as f:
        to_graph = dict(pair.decode().split("=", 1) if isinstance(pair, bytes) else pair.split("=", 1)
                        for pair in f.attrs["graph_names"])
        names = [n.decode() if isinstance(n, bytes) else n for n in f.attrs["param_names"]]
        params = numpy.asarray(f["params"])
        states = {}
        f["model_state"].visititems(lambda name, obj: states.__setitem__(name, numpy.asarray(obj))
                                    if isinstance(obj, h5py.Dataset) and obj.dtype == numpy.float32 else None)
    return to_graph, names, params, states


def model_layers(out):
    """The model table's lines in ddl_train's output, one a layer."""
    return [line for line in out.splitlines() if re.match(r"\s+\d+\s{2,}\S", line)]


class OnnxImport(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        for variable in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"):  # mpirun as root (CI)
            os.environ.setdefault(variable, "1")
        cls.dir = tempfile.mkdtemp(prefix="ddl_onnx_")
        run("tar", "xzf", os.path.join(ROOT, "data", "cifar10_sample.tar.gz"), "-C", cls.dir)
        source, folder = os.path.join(cls.dir, "cifar10_sample"), os.path.join(cls.dir, "few")
        for name in sorted(os.listdir(source)):  # 8 images a class: 64 to train on, 16 held out
            os.makedirs(os.path.join(folder, name))
            for image in sorted(os.listdir(os.path.join(source, name)))[:8]:
                shutil.copy(os.path.join(source, name, image), os.path.join(folder, name, image))
        cls.data = os.path.join(cls.dir, "few.h5")
        run(os.path.join(BIN, "ddl_data"), "import", "--from", folder, "--output", cls.data, "--val-fraction", "0.2",
            "--seed", "1")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def assert_trains_as_in_pytorch(self, model, name, steps, lr=0.05, opset=13, against_float64=True,
                                    optimizer=SGD, size=32, edit=None):
        """Exports `model` as NAME.onnx, trains it `steps` full-batch steps (of SGD unless `optimizer` says
        otherwise) in ddl and in PyTorch from the same weights and compares every tensor (assert_same_tensors;
        against_float64, as by default: also against a float64 copy trained alike, so that a CPU whose sums round
        otherwise (AVX2 against AVX-512) is measured by float32's own spread there). The images are SIZE x SIZE. `edit`, where
        given, rewrites the exported file (its path) before ddl reads it."""
        onnx_file = self.path(f"{name}.onnx")
        export(model, onnx_file, opset, size)
        if edit:
            edit(onnx_file)
        exact = copy.deepcopy(model).double() if against_float64 else None
        checkpoints = self.path(f"{name}.ck")
        data = self.data_of_size(size)
        run(os.path.join(BIN, "ddl_train"), "--model", onnx_file, "--train", data, "--val",
            data.replace(".h5", "_val.h5"), "--epochs", steps, "--steps-per-epoch", 1, "--batch-size", 64,
            *optimizer[0], "--lr", lr, "--threads", 1, "--progress", "never", "--checkpoint-dir", checkpoints)
        self.assert_same_tensors(os.path.join(checkpoints, "last.h5"),
                                 self.train_torch(model, steps, lr, optimizer, data),
                                 exact=None if exact is None else self.train_torch(exact, steps, lr, optimizer, data))

    def data_of_size(self, size):
        """The 64 training images at SIZE x SIZE (32: as imported; else scaled, made once)."""
        if size == 32:
            return self.data
        data = self.path(f"few_{size}.h5")
        if not os.path.exists(data):
            run(os.path.join(BIN, "ddl_data"), "import", "--from", self.path("few"), "--output", data,
                "--val-fraction", "0.2", "--seed", "1", "--resize", size)
        return data

    def train_torch(self, model, steps, lr, optimizer, data):
        with h5py.File(data, "r") as f:
            images = torch.from_numpy(numpy.asarray(f["images"], dtype=numpy.float32) / 255).permute(0, 3, 1, 2).contiguous()
            labels = torch.from_numpy(numpy.asarray(f["labels"], dtype=numpy.int64))
        stepper = optimizer[1](model.parameters(), lr)
        model.train()
        for _ in range(steps):
            stepper.zero_grad()
            nn.functional.cross_entropy(model(images.to(next(model.parameters()).dtype)), labels).backward()
            stepper.step()
        return model

    def assert_same_tensors(self, checkpoint, model, exact=None):
        """ddl's tensors against the torch module's, each within TOLERANCE of the tensor's largest value.
        With `exact`, the same module trained in float64: ddl's distance from it may then also be up to
        F32_SPREAD times float32 PyTorch's own (at most F32_CAP), as deep stacks of BatchNorm amplify the
        rounding of sums taken in another order (oneDNN's and PyTorch's) beyond any fixed tolerance."""
        to_graph, names, params, states = ddl_tensors(checkpoint)
        expected = {k: v.detach().numpy() for k, v in model.state_dict().items()}
        truth = {k: v.detach().numpy() for k, v in (model if exact is None else exact).state_dict().items()}

        def compare(name, mine):
            tensor, reference = expected[to_graph[name]], truth[to_graph[name]]
            scale = max(numpy.abs(reference).max(), 1e-12)
            allowed = TOLERANCE
            if exact is not None:
                allowed = min(max(TOLERANCE, F32_SPREAD * numpy.abs(tensor - reference).max() / scale), F32_CAP)
            self.assertLessEqual(numpy.abs(mine.reshape(tensor.shape) - reference).max() / scale, allowed,
                                 f"{name} ({to_graph[name]})")

        offset, compared = 0, set()  # a weight that several layers share is each one's parameter: each compared
        for name in names:
            size = expected[to_graph[name]].size
            compare(name, params[offset:offset + size])
            offset += size
            compared.add(to_graph[name])
        self.assertEqual(offset, params.size)
        for name, values in states.items():
            if name in to_graph:
                compare(name, values)
                compared.add(to_graph[name])
        # Integer buffers (BatchNorm's num_batches_tracked, a relative position index) are no one's to train.
        self.assertEqual(len(compared), len([k for k, v in expected.items() if v.dtype.kind == "f"]))

    def test_a_residual_network_trains_as_in_pytorch_at_opsets_13_and_17(self):
        """At opset 17 with its weights in a file beside the graph (ONNX's external data)."""
        for opset in (13, 17):
            with self.subTest(opset=opset):
                torch.manual_seed(opset)
                model = randomize_batch_norms(SmallResNet())
                self.assert_trains_as_in_pytorch(model, f"resnet_{opset}", steps=3, opset=opset,
                                                 edit=weights_beside if opset == 17 else None)

    def test_networks_labs_write_train_as_in_pytorch(self):
        """GroupNorm and InstanceNorm, upsampling and bilinear interpolation, CBAM's attention (paths that meet
        in different nodes) with a BatchNorm among them, activations with no layer of ddl's, a rectangular kernel,
        attention over a convolution's tokens, slices and joins along rows, a BatchNorm1d head, reflected and
        replicated borders, transposed convolutions, an attention gate and a bias added apart from its product
        (pieces cut in parts), a weight that two layers share, DOUBLE bounds, 1 - x, rsqrt, F.glu, a 1-d pool, an
        interpolation to a size, pixel (un)shuffles, F.unfold, torch.flip, x.std, a per-image mix of kernels and a
        graph that ends in an einsum and a bias, skip connections around most of a U-Net: against float64 PyTorch as
        float32 PyTorch is."""
        # Each module made after its seed: made before, its weights came from wherever the process's generator
        # stood, another draw each run (a GroupNorm's bias once landed where float32 and float64 part).
        for index, network in enumerate((GroupNormNet, UpsampleNet, CBAM, Activations, AttnPool, ConcatOfRows,
                                         HalfTheRowsConvolved, Bn1dHead, PadsAndNorms, Decoder, AttentionGate,
                                         BiasAddedLater, SharedExponent, ScalarsAndHalves, PyramidAndShuffle,
                                         FlipsAndKernelMixes, SkipUNet)):
            with self.subTest(module=network.__name__):
                torch.manual_seed(40 + index)
                self.assert_trains_as_in_pytorch(network(), f"lab_{network.__name__}", steps=2)

    def test_comparisons_scans_and_triangles_train_as_in_pytorch(self):
        """A comparison feeding Where, a .bool() mask of each pixel, CumSum, Trilu (opset 14), % and torch.fmod on
        image values, in pieces."""
        torch.manual_seed(60)
        self.assert_trains_as_in_pytorch(ScansAndMasks(), "lab_ScansAndMasks", steps=3, lr=0.2, opset=14)

    def test_a_codebook_lookup_and_a_three_operand_einsum_train_as_in_pytorch(self):
        """A VQ-VAE's codebook read at each token's nearest entry (Gather at indices an ArgMin computes, the
        codebook trained through it) and a bilinear form between tokens as one einsum of three operands."""
        torch.manual_seed(61)
        self.assert_trains_as_in_pytorch(CodebookAndBilinear(), "lab_CodebookAndBilinear", steps=3, lr=0.2)

    def test_group_norm_and_mish_run_as_one_operator_each(self):
        """nn.GroupNorm's export (a Reshape, InstanceNormalization, a Reshape back, Mul, Add) and F.mish's
        (Softplus, Tanh, Mul) are rewritten as one GroupNormalization and one oneDNN mish: the model printed says so."""
        class GroupNormMish(nn.Module):
            def __init__(self):
                super().__init__()
                self.c1 = nn.Conv2d(3, 8, 3, padding=1)
                self.gn = nn.GroupNorm(4, 8)
                self.fc = nn.Linear(8, 10)

            def forward(self, x):
                return self.fc(F.mish(self.gn(self.c1(x))).mean([2, 3]))
        onnx_file = self.path("group_norm_mish.onnx")
        export(GroupNormMish(), onnx_file, 13)
        out = run(os.path.join(BIN, "ddl_train"), "--model", onnx_file, "--train", self.data, "--epochs", 1,
                  "--steps-per-epoch", 1, "--threads", 1, "--progress", "never").stdout
        layers = out.split("total parameters")[0]
        self.assertIn("graph of 1 operators (GroupNormalization 1)", layers)
        self.assertRegex(layers, r"\n +\d+ +mish ")
        self.assertNotIn("InstanceNormalization", layers)
        self.assertNotIn("Softplus", layers)

    def test_lars_and_lamb_train_as_their_papers_formulas(self):
        lars = (["--optimizer", "lars", "--momentum", 0.9, "--weight-decay", 5e-4, "--lars-trust", 0.02],
                lambda params, lr: Lars(params, lr, momentum=0.9, weight_decay=5e-4, eta=0.02))
        lamb = (["--optimizer", "lamb", "--adam-beta1", 0.9, "--adam-beta2", 0.999, "--adam-epsilon", 1e-6,
                 "--weight-decay", 0.1], lambda params, lr: Lamb(params, lr, (0.9, 0.999), 1e-6, 0.1))
        for name, optimizer, lr in (("lars", lars, 2.0), ("lamb", lamb, 0.05)):
            with self.subTest(optimizer=name):
                torch.manual_seed(5)  # no BatchNorm: a bias before one has a gradient of rounding noise, which
                # LAMB's division by sqrt(v) blows up to a full step of either sign
                self.assert_trains_as_in_pytorch(InceptionLike(), f"inception_{name}", steps=3, lr=lr,
                                                 optimizer=optimizer)

    def test_silu_dilated_groups_ceil_mode_and_mean_train_as_in_pytorch(self):
        torch.manual_seed(17)
        model = randomize_batch_norms(EfficientNetLike())
        self.assert_trains_as_in_pytorch(model, "efficient", steps=3)

    def test_splits_and_squeezes_train_as_in_pytorch(self):
        torch.manual_seed(18)
        self.assert_trains_as_in_pytorch(SplitsAndSqueezes(), "splits", steps=3)

    def test_a_global_max_pool_trains_as_in_pytorch(self):
        # PyTorch 1.13 exports nn.AdaptiveMaxPool2d(1) as a MaxPool of the whole plane; other exporters write
        # GlobalMaxPool, as the test rewrites it.
        def global_max_pool(path):
            import onnx
            model = onnx.load(path)
            pool = next(n for n in model.graph.node if n.op_type == "MaxPool")
            pool.op_type = "GlobalMaxPool"
            del pool.attribute[:]
            onnx.save(model, path)

        torch.manual_seed(20)
        model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveMaxPool2d(1), nn.Flatten(),
                              nn.Linear(16, 10))
        self.assert_trains_as_in_pytorch(model, "global_max", steps=3, edit=global_max_pool)

    def test_pads_uneven_and_same_train_as_in_pytorch(self):
        # As exported: every F.pad a Pad node (a padding layer). Then the first three in their Convs: uneven
        # pads, auto_pad SAME_UPPER (a 4-wide window pads 1 before and 2 after) and SAME_LOWER (a 2-wide one,
        # 1 before), as other exporters write them.
        for edit in (None, lambda path: pads_into_convs(path, [[0, 0, 1, 1], "SAME_UPPER", "SAME_LOWER"])):
            with self.subTest(pads_in_convs=edit is not None):
                torch.manual_seed(19)
                self.assert_trains_as_in_pytorch(Paddings(), "paddings", steps=3, edit=edit)

    def test_an_inception_module_trains_as_in_pytorch(self):
        torch.manual_seed(19)
        model = InceptionLike()
        self.assert_trains_as_in_pytorch(model, "inception", steps=3)

    def test_torchvisions_resnet18_with_a_3x3_stem_trains_as_in_pytorch(self):
        # torchvision's resnet18 with a 3x3 stem, as CIFAR users train it (its max pool kept, so that the
        # float64 steps take seconds). Its 20 BatchNorms make the steps chaotic: after two, float32 PyTorch
        # is already 3e-3 of conv1's largest weight from its own float64 steps, so ddl is held to float64's
        # as mobilenet_v2 is (docs/onnx.md).
        import torchvision
        torch.manual_seed(18)
        model = torchvision.models.resnet18(num_classes=10)
        model.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.assert_trains_as_in_pytorch(randomize_batch_norms(model), "resnet18_cifar", steps=2)

    def test_torchvisions_alexnet_trains_as_in_pytorch(self):
        # alexnet's features (an 11x11 convolution of stride 4, three max pools, five ReLU convolutions) at
        # 64x64, where they end at 1x1 pixel: its adaptive pool to 6x6 would copy that pixel 36 times, which
        # PyTorch cannot export, so the classifier reads the 256 features, and is narrower.
        import torchvision
        torch.manual_seed(12)
        model = torchvision.models.alexnet(num_classes=10)
        model.avgpool = nn.Identity()
        model.classifier = nn.Sequential(nn.Dropout(0.0), nn.Linear(256, 128), nn.ReLU(inplace=True),
                                         nn.Dropout(0.0), nn.Linear(128, 128), nn.ReLU(inplace=True),
                                         nn.Linear(128, 10))
        self.assert_trains_as_in_pytorch(model, "alexnet", steps=3, size=64)

    def test_torchvisions_mobilenet_v2_trains_as_in_pytorch(self):
        # Depthwise convolutions (one group a channel), ReLU6 exported as Clip, inverted residual blocks.
        import torchvision
        torch.manual_seed(7)
        model = randomize_batch_norms(torchvision.models.mobilenet_v2(num_classes=10, width_mult=0.5))
        model.classifier[0].p = 0.0  # its Dropout: the masks of two programs cannot agree
        # One step: past it, PyTorch's float32 steps leave its own float64 ones by over 10% within two (52
        # BatchNorms over 64 images, the last at 1x1 pixels).
        self.assert_trains_as_in_pytorch(model, "mobilenet_v2", steps=1, lr=0.01)

    def test_torchvisions_squeezenet_trains_as_in_pytorch(self):
        # Max pooling in ceil_mode, and fire modules: two computed paths joined in a Concat.
        import torchvision
        torch.manual_seed(11)
        model = torchvision.models.squeezenet1_1(num_classes=10)
        model.classifier[0].p = 0.0
        self.assert_trains_as_in_pytorch(model, "squeezenet", steps=3, lr=0.01)

    def test_torchvisions_shufflenet_v2_trains_as_in_pytorch(self):
        # Channel splits (Slice along the channels), a concatenation of the halves and the channel shuffle
        # (Reshape, Transpose, Reshape): torchvision's ShuffleNetV2 with its stages narrower, at 64x64. Halves
        # of 24 channels are not whole blocks of 16 (read through a plain copy), those of 32 and 48 are.
        # Without its BatchNorms, 3 steps: ddl is as far from float64 PyTorch as float32 PyTorch is (1.5e-7).
        # With its 26 BatchNorms, down to 2x2 pixels, one step (1.2e-4): by the third they amplify the rounding
        # of oneDNN's batch statistics to 7e-3, as in resnet18 (docs/onnx.md).
        import torchvision
        for batch_norms, steps in ((False, 3), (True, 1)):
            with self.subTest(batch_norms=batch_norms):
                torch.manual_seed(14)
                model = torchvision.models.ShuffleNetV2([2, 2, 2], [24, 48, 64, 96, 128], num_classes=10)
                model = randomize_batch_norms(model) if batch_norms else without_batch_norms(model)
                self.assert_trains_as_in_pytorch(model, f"shufflenet_{steps}", steps=steps, lr=0.01, size=64)

    def test_torchvisions_mobilenet_v3_trains_as_in_pytorch(self):
        # Hard swish exported as x * HardSigmoid(x) (a gate of a factor an element) and squeeze-and-excitation
        # gates of HardSigmoid; ReduceMean-free, as torchvision pools adaptively. BatchNorms at 1x1 pixels, as
        # mobilenet_v2's test: against float64 PyTorch.
        import torchvision
        torch.manual_seed(13)
        model = randomize_batch_norms(torchvision.models.mobilenet_v3_small(num_classes=10))
        model.classifier[2].p = 0.0
        self.assert_trains_as_in_pytorch(model, "mobilenet_v3", steps=1, lr=0.01)

    def test_torchvisions_densenet_trains_as_in_pytorch(self):
        # Each dense layer concatenates every feature map before it; transitions pad nothing and pool.
        # densenet121's layers at half its growth, two dense blocks of three: the same graph, smaller. The
        # first block's channels fill whole blocks of 16, so its concatenations take the convolutions'
        # blocked layout; the second's (40 + 16k) do not, so on AVX-512 they stay plain.
        import torchvision
        torch.manual_seed(9)
        model = randomize_batch_norms(torchvision.models.DenseNet(growth_rate=16, block_config=(3, 3),
                                                                  num_init_features=32, bn_size=1, num_classes=10))
        self.assert_trains_as_in_pytorch(model, "densenet", steps=3)

    def test_torchvisions_convnext_and_efficientnet_train_as_in_pytorch(self):
        # ConvNeXt: a depthwise 7x7 convolution, then channels last (Transpose), a layer norm, two linear
        # layers with GELU and a layer scale in a piece, back to channels first and a residual sum; the linear
        # layers' transposed weights are no path of their own. Its layer scale at 0.5, not 1e-6, so that the
        # blocks' gradients count. EfficientNet: MBConv blocks of SiLU (x * sigmoid(x)), depthwise convolutions
        # and squeeze-and-excitation gates, without its BatchNorms (3 steps). Stochastic depth off (p = 0), as
        # PyTorch 1.13 exports no Bernoulli in training mode; it is the identity then.
        import torchvision
        from torchvision.models.convnext import CNBlockConfig
        from torchvision.models.efficientnet import MBConvConfig
        torch.manual_seed(15)
        convnext = torchvision.models.ConvNeXt([CNBlockConfig(16, 32, 2), CNBlockConfig(32, None, 1)],
                                               layer_scale=0.5, num_classes=10)
        efficientnet = without_batch_norms(torchvision.models.EfficientNet(
            [MBConvConfig(1, 3, 1, 16, 16, 1), MBConvConfig(4, 5, 2, 16, 24, 2)], dropout=0.0,
            stochastic_depth_prob=0.0, num_classes=10))
        for name, model in (("convnext", convnext), ("efficientnet", efficientnet)):
            with self.subTest(model=name):
                self.assert_trains_as_in_pytorch(model, name, steps=3, lr=0.01)

    def test_a_vision_transformer_trains_as_in_pytorch(self):
        # torchvision's own: patches, a class token, attention and GELU as PyTorch 1.13 exports them (MatMul,
        # Transpose, Reshape, Slice, Softmax, Erf; layer norms written out at opset 13, LayerNormalization at
        # 17); ddl takes what its layers do not express as GraphLayers.
        from torchvision.models.vision_transformer import VisionTransformer
        for opset in (13, 17):
            with self.subTest(opset=opset):
                torch.manual_seed(11)
                model = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32,
                                          mlp_dim=64, num_classes=10)
                self.assert_trains_as_in_pytorch(model, f"vit_{opset}", steps=3, opset=opset)

    def test_swin_and_maxvit_train_as_in_pytorch(self):
        """torchvision's swin_t and maxvit_t in small, stochastic depth at 0. Swin's shifted windows: the attention
        mask computed from constants (ScatterND into zeros, Sub, Equal, Not, Where), folded by the registry's own
        operators; the rolls (Slice, Concat), the padding to whole windows (a Pad of 0, its pads from Mod).
        MaxViT: MBConv blocks (BatchNorms, depthwise convolutions, squeeze-and-excitation), block and grid
        attention on window partitions of rank 6, their products Einsums, relative position biases gathered from
        parameters."""
        from torchvision.models.maxvit import MaxVit
        from torchvision.models.swin_transformer import SwinTransformer
        with self.subTest(model="swin"):
            torch.manual_seed(13)
            model = SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 2],
                                    window_size=[4, 4], stochastic_depth_prob=0.0, num_classes=10)
            self.assert_trains_as_in_pytorch(model, "swin", steps=3)
        with self.subTest(model="maxvit"):
            torch.manual_seed(14)
            model = MaxVit(input_size=(32, 32), stem_channels=8, partition_size=2, block_channels=[16, 32],
                           block_layers=[1, 1], head_dim=8, stochastic_depth_prob=0.0, num_classes=10)
            # MBConv's pre_norm shift reaches only conv_a's BatchNorm, which takes the mean out again: at 0 its
            # gradient is rounding alone, and so is its value after a step. Away from 0 it is compared.
            self.assert_trains_as_in_pytorch(randomize_batch_norms(model), "maxvit", steps=3)

    def test_a_vision_transformer_in_ranks_and_stages_and_back_in_pytorch(self):
        from torchvision.models.vision_transformer import VisionTransformer
        torch.manual_seed(12)
        model = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32,
                                  mlp_dim=64, num_classes=10)
        graph = self.path("vit_layouts.onnx")
        export(model, graph, 13)
        self.assert_layouts_train_as_one_rank(graph)
        # Trained, exported back and loaded into the module: its eval-mode logits are ddl_predict's.
        checkpoints, weights = self.path("vit_back.ck"), self.path("vit_back.pt")
        run(os.path.join(BIN, "ddl_train"), "--model", graph, "--train", self.data, "--epochs", 1,
            "--steps-per-epoch", 2, "--batch-size", 16, "--threads", 1, "--progress", "never",
            "--checkpoint-dir", checkpoints)
        run(sys.executable, EXPORT, os.path.join(checkpoints, "last.h5"), weights)
        model.load_state_dict(torch.load(weights))
        model.eval()
        self.assert_predicts_as(os.path.join(checkpoints, "last.h5"), model)

    def assert_predicts_as(self, checkpoint, model):
        """ddl_predict's logits of one class's images are the module's, within 1e-4 of the largest."""
        from PIL import Image
        folder = os.path.join(self.dir, "few", sorted(os.listdir(os.path.join(self.dir, "few")))[0])
        rows = run(os.path.join(BIN, "ddl_predict"), "--checkpoint", checkpoint, "--logits", folder, "--threads",
                   1).stdout.strip().splitlines()[1:]
        files = [row.split(",")[0] for row in rows]
        ddl_logits = numpy.array([[float(v) for v in row.split(",")[1:]] for row in rows])
        pixels = numpy.stack([numpy.asarray(Image.open(f).convert("RGB"), dtype=numpy.float32) / 255 for f in files])
        with torch.no_grad():
            torch_logits = model(torch.from_numpy(pixels).permute(0, 3, 1, 2).contiguous()).numpy()
        self.assertEqual(ddl_logits.shape, torch_logits.shape)
        self.assertLessEqual(numpy.abs(ddl_logits - torch_logits).max(), 1e-4 * numpy.abs(torch_logits).max())

    def test_the_samples_squeeze_excitation_resnet_trains_as_in_pytorch(self):
        # The module data/models/export_sample.py exports (a gate inside a residual block's body).
        spec = importlib.util.spec_from_file_location("export_sample", SAMPLE_SCRIPT)
        sample = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sample)
        torch.manual_seed(5)
        model = randomize_batch_norms(sample.SampleNet())
        self.assert_trains_as_in_pytorch(model, "se_resnet", steps=3)
        # The repository's own file trains as it is.
        out = run(os.path.join(BIN, "ddl_train"), "--model", SAMPLE, "--train", self.data, "--epochs", 1,
                  "--steps-per-epoch", 2, "--batch-size", 16, "--threads", 1, "--progress", "never").stdout
        self.assertIn(f"initialised from the graph's initializers ({SAMPLE})", out)
        self.assertIn("total parameters: 61434", out)

    def test_a_trained_graph_goes_back_to_pytorch_and_to_onnx(self):
        spec = importlib.util.spec_from_file_location("export_sample", SAMPLE_SCRIPT)
        sample = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sample)
        checkpoints = self.path("back.ck")
        run(os.path.join(BIN, "ddl_train"), "--model", SAMPLE, "--train", self.data, "--epochs", 2,
            "--steps-per-epoch", 2, "--batch-size", 16, "--threads", 1, "--progress", "never",
            "--checkpoint-dir", checkpoints)
        trained, weights, graph = os.path.join(checkpoints, "last.h5"), self.path("back.pt"), self.path("back.onnx")
        run(sys.executable, EXPORT, trained, weights, "--onnx", graph)
        model = sample.SampleNet()
        missing, unexpected = model.load_state_dict(torch.load(weights), strict=False)
        self.assertEqual(unexpected, [])
        self.assertTrue(all(key.endswith("num_batches_tracked") for key in missing), missing)
        # The exported module's evaluation loss on the held-out images is ddl_eval's.
        val = self.data.replace(".h5", "_val.h5")
        out = run(os.path.join(BIN, "ddl_eval"), "--checkpoint", trained, "--data", val, "--threads", 1).stdout
        ddl_loss = float(out.split("loss ")[1].split()[0])
        with h5py.File(val, "r") as f:
            images = torch.from_numpy(numpy.asarray(f["images"], dtype=numpy.float32) / 255).permute(0, 3, 1, 2)
            labels = torch.from_numpy(numpy.asarray(f["labels"], dtype=numpy.int64))
        model.eval()
        with torch.no_grad():
            torch_loss = nn.functional.cross_entropy(model(images.contiguous()), labels).item()
        self.assertAlmostEqual(ddl_loss, torch_loss, delta=1e-4 * abs(torch_loss), msg=out)
        self.assert_predicts_as(trained, model)
        # The graph with the trained weights trains in ddl again, from those weights.
        again = run(os.path.join(BIN, "ddl_train"), "--model", graph, "--train", self.data, "--epochs", 1,
                    "--steps-per-epoch", 1, "--batch-size", 16, "--threads", 1, "--progress", "never").stdout
        self.assertIn(f"initialised from the graph's initializers ({graph})", again)

    def test_data_of_another_class_count_refits_the_classifier(self):
        few, five = os.path.join(self.dir, "few"), self.path("five")
        for name in sorted(os.listdir(few))[:5]:
            shutil.copytree(os.path.join(few, name), os.path.join(five, name))
        data = self.path("five.h5")
        run(os.path.join(BIN, "ddl_data"), "import", "--from", five, "--output", data)
        checkpoints = self.path("five.ck")
        out = run(os.path.join(BIN, "ddl_train"), "--model", SAMPLE, "--train", data, "--epochs", 1,
                  "--steps-per-epoch", 1, "--batch-size", 8, "--threads", 1, "--progress", "never",
                  "--checkpoint-dir", checkpoints).stdout
        self.assertIn("head.weight, head.bias start afresh (the graph's classifier is for another class count)", out)
        self.assertIn("total parameters: 61109", out)  # 61,434 less 5 x 64 weights and 5 biases
        weights = self.path("five.pt")
        run(sys.executable, EXPORT, os.path.join(checkpoints, "last.h5"), weights)
        state = torch.load(weights)
        self.assertEqual(tuple(state["head.weight"].shape), (5, 64))
        self.assertEqual(tuple(state["head.bias"].shape), (5,))

    def ddl_params(self, *command, optimizer=SGD[0]):
        """The parameters after 4 steps of the command, its output, and what training moved them by: a tolerance
        relative to the move allows for the order the all-reduce sums in, whose effect on a step depends on the
        CPU's vector width (AVX2 or AVX-512), not on the parameters' size."""
        checkpoints = self.path(f"layout{len(os.listdir(self.dir))}.ck")
        result = run(*command, "--train", self.data, "--epochs", 2, "--steps-per-epoch", 2, *optimizer, "--lr", 0.05,
                     "--threads", 1, "--progress", "never", "--checkpoint-dir", checkpoints)
        to_graph, names, params, _ = ddl_tensors(os.path.join(checkpoints, "last.h5"))
        graph = command[command.index("--model") + 1]
        import onnx
        from onnx import numpy_helper
        start = {t.name: numpy_helper.to_array(t) for t in onnx.load(graph).graph.initializer}
        start = numpy.concatenate([start[to_graph[name]].ravel() for name in names])
        return params, result.stdout, numpy.abs(params - start).max()

    def assert_cut_trains_as_one_rank(self, train, cut, layers, one, moved):
        """2 pipeline stages, the second from layer `cut` of `layers`, train as one rank did (`one`, `moved`:
        its ddl_params)."""
        params, out, _ = self.ddl_params("mpirun", "--oversubscribe", "-np", "2", *train, "--batch-size", 32,
                                         "--micro-batches", 2, "--pipeline-stages", 2,
                                         "--partition", f"{cut},{layers - cut}")
        self.assertIn("stage 1", out)
        self.assertLessEqual(numpy.abs(params - one).max(), 1e-3 * moved, out)

    def assert_layouts_train_as_one_rank(self, graph):
        """2 ranks, 2 pipeline stages and the classifier split give one rank's parameters."""
        train = [os.path.join(BIN, "ddl_train"), "--model", graph]
        ranks = ["mpirun", "--oversubscribe", "-np", "2"] + train
        one, _, moved = self.ddl_params(*train, "--batch-size", 32)
        for name, command in (
                ("2 ranks", ranks + ["--batch-size", 16]),
                ("2 stages", ranks + ["--batch-size", 32, "--pipeline-stages", 2, "--micro-batches", 2]),
                ("split classifier", ranks + ["--batch-size", 16, "--tensor-parallel", 2])):
            with self.subTest(graph=os.path.basename(graph), layout=name):
                params, out, _ = self.ddl_params(*command)
                self.assertEqual(params.shape, one.shape, out)
                self.assertLessEqual(numpy.abs(params - one).max(), 1e-3 * moved, out)

    def test_ranks_pipelines_and_split_layers_train_as_one_rank(self):
        torch.manual_seed(3)
        cnn = self.path("cnn.onnx")
        export(SmallCnn(), cnn, 13)
        self.assert_layouts_train_as_one_rank(cnn)
        train = [os.path.join(BIN, "ddl_train"), "--model", cnn]
        ranks = ["mpirun", "--oversubscribe", "-np", "2"] + train
        # A checkpoint of 2 stages resumes on 1 rank.
        checkpoints = self.path("stages.ck")
        common = ["--train", self.data, "--steps-per-epoch", 2, "--batch-size", 32, "--threads", 1, "--progress",
                  "never", "--checkpoint-dir", checkpoints]
        run(*ranks, *common, "--epochs", 1, "--pipeline-stages", 2)
        out = run(*train, *common, "--epochs", 2, "--resume", "auto").stdout
        self.assertIn("resumed from", out)

    def test_a_graph_of_many_forks_and_joins_trains_in_ranks_and_stages_as_one_rank(self):
        """CBAM's block (paths that meet in different nodes, a value read by many nodes, several joins) without its
        BatchNorm, whose batch statistics would differ with the ranks' batches: 2 ranks, 2 pipeline stages and the
        split classifier as one rank."""
        torch.manual_seed(6)
        module = CBAM()
        module.sa = nn.Conv2d(2, 1, 7, padding=3)
        graph = self.path("forks_and_joins.onnx")
        export(module, graph, 13)
        self.assert_layouts_train_as_one_rank(graph)

    def test_a_pipeline_cut_where_two_tensors_cross_trains_as_one_rank(self):
        """An attention gate is one piece of the graph, cut in parts after its convolutions; 2 pipeline stages
        cut where the skip features and the down path's output cross (one message holding both) train as one
        rank."""
        torch.manual_seed(7)
        graph = self.path("attention_gate.onnx")
        export(AttentionGate(), graph, 13)
        train = [os.path.join(BIN, "ddl_train"), "--model", graph]
        one, out, moved = self.ddl_params(*train, "--batch-size", 32, "--micro-batches", 2)
        layers = model_layers(out)
        crossing = [i for i, line in enumerate(layers) if "hands on 2 values" in line]
        self.assertTrue(crossing, out)
        cut = crossing[0] + 1
        self.assert_cut_trains_as_one_rank(train, cut, len(layers), one, moved)

    def test_a_pipeline_cut_inside_a_u_nets_skip_connections_trains_as_one_rank(self):
        """A U-Net's skip connections are opened into the chain: 2 pipeline stages cut between the fork and the
        join of both (the chain's value and two side values in one message) train as one rank, and the planner
        may choose such a cut."""
        torch.manual_seed(8)
        graph = self.path("skip_unet.onnx")
        export(SkipUNet(), graph, 13)
        train = [os.path.join(BIN, "ddl_train"), "--model", graph]
        one, out, moved = self.ddl_params(*train, "--batch-size", 32, "--micro-batches", 2)
        layers = model_layers(out)
        forks = [i for i, line in enumerate(layers) if re.match(r"\s+\d+\s+fork", line)]
        joins = [i for i, line in enumerate(layers) if re.match(r"\s+\d+\s+join", line)]
        self.assertEqual(len(forks), 2, out)
        self.assertEqual(len(joins), 2, out)
        cut = forks[1] + 2  # after the inner fork's first layer: inside both blocks
        self.assertLess(cut, joins[0], out)
        self.assert_cut_trains_as_one_rank(train, cut, len(layers), one, moved)

    def test_layers_that_share_a_weight_stay_in_one_stage(self):
        """The default pipeline partition and the planner's never part two convolutions that share a weight:
        2 stages train as one rank, and the plan's cut falls outside them."""
        torch.manual_seed(9)
        graph = self.path("shared_convolution.onnx")
        export(SharedConvolution(), graph, 13)
        train = [os.path.join(BIN, "ddl_train"), "--model", graph]
        one, out, moved = self.ddl_params(*train, "--batch-size", 32, "--micro-batches", 2)
        layers = model_layers(out)
        shared = [i for i, line in enumerate(layers) if "conv2d 8->8" in line]
        self.assertEqual(len(shared), 3, out)
        params, out, _ = self.ddl_params("mpirun", "--oversubscribe", "-np", "2", *train, "--batch-size", 32,
                                         "--micro-batches", 2, "--pipeline-stages", 2)
        stage1 = re.search(r"stage 1: layers (\d+)-", out)
        self.assertTrue(stage1, out)
        self.assertFalse(shared[0] < int(stage1.group(1)) <= shared[2], out)
        self.assertLessEqual(numpy.abs(params - one).max(), 1e-3 * moved, out)
        plan = run(*train, "--train", self.data, "--batch-size", 32, "--strategy", "pipeline", "--plan-only",
                   "--plan-for", 4)
        cut = re.search(r"chosen .* cut (\d+(?:,\d+)*)", plan.stdout)
        self.assertTrue(cut, plan.stdout)
        starts = numpy.cumsum([int(c) for c in cut.group(1).split(",")])[:-1]
        self.assertFalse(any(shared[0] < start <= shared[2] for start in starts), plan.stdout)

    def test_resnet18s_graph_in_two_stages_trains_as_one_rank(self):
        # One rank takes the same micro-batches, so that every BatchNorm sees the same images (as for the
        # built-in resnet18: DdlTrain.PipelinesMatchOneRankForResnet18). The classifier split gathers the
        # group's images, each rank's BatchNorms seeing others than one rank's micro-batches: that layout is
        # checked on a graph without BatchNorm (test_ranks_pipelines_and_split_layers_train_as_one_rank).
        import torchvision
        torch.manual_seed(12)
        graph = self.path("resnet18_layouts.onnx")
        export(randomize_batch_norms(torchvision.models.resnet18(num_classes=10)), graph, 13)
        train = [os.path.join(BIN, "ddl_train"), "--model", graph]
        ranks = ["mpirun", "--oversubscribe", "-np", "2"] + train
        one, _, moved = self.ddl_params(*train, "--batch-size", 32, "--micro-batches", 2)
        params, out, _ = self.ddl_params(*ranks, "--batch-size", 32, "--pipeline-stages", 2, "--micro-batches", 2)
        self.assertIn("stage 1", out)
        self.assertLessEqual(numpy.abs(params - one).max(), 1e-3 * moved, out)

    def test_a_graph_trains_in_bf16_near_f32_and_its_checkpoint_resumes_in_f32(self):
        # The sample's graph (residual and squeeze-excitation blocks), and a vision transformer, whose pieces
        # multiply in bf16; --precision auto: bf16 where the CPU multiplies in it, else f32 (the comparison
        # then holds trivially, and the note says so).
        from torchvision.models.vision_transformer import VisionTransformer
        torch.manual_seed(15)
        vit = self.path("vit_bf16.onnx")
        export(VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
                                 num_classes=10), vit, 13)
        for model, name in ((SAMPLE, "sample"), (vit, "vit")):
            with self.subTest(model=name):
                common = [os.path.join(BIN, "ddl_train"), "--model", model, "--train", self.data, "--optimizer",
                          "sgd", "--momentum", 0.9, "--lr", 0.02, "--batch-size", 16, "--threads", 1, "--progress",
                          "never"]
                f32 = run(*common, "--epochs", 3, "--checkpoint-dir", self.path(f"{name}_f32.ck")).stdout
                bf16 = run(*common, "--epochs", 3, "--precision", "auto", "--checkpoint-dir",
                           self.path(f"{name}_bf16.ck")).stdout

                def loss(out):
                    return float(re.findall(r"train loss ([0-9.]+)", out)[-1])
                self.assertLess(abs(loss(bf16) - loss(f32)), 0.05 * loss(f32), f"{f32}\n{bf16}")
                resumed = run(*common, "--epochs", 4, "--resume", "auto", "--checkpoint-dir",
                              self.path(f"{name}_bf16.ck")).stdout
                self.assertIn("resumed from", resumed)
                self.assertNotIn("precision bf16", resumed)  # resumed in f32

    def test_dropout_draws_a_fresh_mask_each_step_and_the_same_on_a_resume(self):
        """Dropout at p > 0 trains without an edit to the module: the masks change the run (another --seed,
        another result), and a run stopped and resumed draws the masks an unbroken run draws."""
        torch.manual_seed(21)
        module = DroppedAttention()
        export(module, self.path("dropped.onnx"), 13)
        module.attn.dropout, module.drop.p = 0.0, 0.0
        export(module, self.path("kept.onnx"), 13)

        def train(name, *more):
            return run(os.path.join(BIN, "ddl_train"), "--model", self.path(f"{name.split('_')[0]}.onnx"), "--train",
                       self.data, "--batch-size", 16, "--lr", 0.05, "--threads", 1, "--progress", "never",
                       "--checkpoint-dir", self.path(f"{name}.ck"), *more).stdout
        train("dropped_whole", "--epochs", 2)
        train("dropped_halves", "--epochs", 1)
        self.assertIn("resumed from", train("dropped_halves", "--epochs", 2, "--resume", "auto"))
        train("kept", "--epochs", 2)
        whole, halves, kept = (ddl_tensors(self.path(f"{name}.ck/last.h5"))[2]
                               for name in ("dropped_whole", "dropped_halves", "kept"))
        numpy.testing.assert_array_equal(whole, halves)
        self.assertGreater(numpy.abs(whole - kept).max(), 1e-4)  # the same run without the masks

    def test_lars_and_lamb_on_two_ranks_and_two_stages_train_as_one_rank(self):
        torch.manual_seed(4)
        cnn = self.path("cnn_layerwise.onnx")
        export(SmallCnn(), cnn, 13)
        train = [os.path.join(BIN, "ddl_train"), "--model", cnn]
        ranks = ["mpirun", "--oversubscribe", "-np", "2"] + train
        for optimizer in (["--optimizer", "lars", "--lars-trust", 0.02, "--weight-decay", 5e-4],
                          ["--optimizer", "lamb", "--weight-decay", 0.01]):
            one, _, moved = self.ddl_params(*train, "--batch-size", 32, optimizer=optimizer)
            # --check-replicas 1: the replicas' parameters compared bit for bit after every step.
            for name, command in (("2 ranks", ranks + ["--batch-size", 16, "--check-replicas", 1]),
                                  ("2 stages", ranks + ["--batch-size", 32, "--pipeline-stages", 2])):
                with self.subTest(optimizer=optimizer[1], layout=name):
                    params, out, _ = self.ddl_params(*command, optimizer=optimizer)
                    self.assertLessEqual(numpy.abs(params - one).max(), 1e-3 * moved, out)
        # A split layer's trust ratio would need the whole layer's norm: refused in one line.
        refused = run(*ranks, "--train", self.data, "--optimizer", "lamb", "--tensor-parallel", 2, expect=2)
        self.assertIn("--optimizer lamb needs whole layers on each rank", refused.stderr)

    def test_a_replanned_run_moves_with_the_graphs_values(self):
        # After the first layout's models are built the job keeps the graph without its weights; the next
        # layout's models take every value from the moved state. Links slowed by the test hook after the
        # run began in data parallelism make the re-plan move it (as DdlTrain.Replanning... does for
        # seed_cnn); its parameters equal those of a run that stayed.
        torch.manual_seed(3)
        cnn = self.path("replan.onnx")
        export(SmallCnn(), cnn, 13)
        # ddl_train's test build (tests/launch/ddl_train_faults.cpp) slows the links.
        mpirun = ["mpirun", "--oversubscribe", "-np", 2, os.path.join(BIN, "ddl_train_faults"), "--model", cnn,
                  "--train", self.data, "--threads", 1, "--progress", "never", "--batch-size", 16]
        profile = self.path("replan.profile")
        run(*mpirun, "--strategy", "auto", "--plan-only", "--save-profile", profile)
        def free(line):  # links and an optimizer that cost nothing, as when the run began
            key = line.split(" ")[0]
            return {"within_node": key + " 0 1e15", "between_nodes": key + " 0 1e15",
                    "optimizer_s_per_param": key + " 0"}.get(key, line.rstrip("\n"))

        with open(profile) as f:  # the links' timings by size go: without them a link is its line
            lines = [free(line) for line in f if not line.split(" ")[0].endswith(("_ring_steps", "_messages"))]
        with open(profile, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.environ["DDL_TEST_SLOW_LINKS"] = "1:1000"
        try:
            params = []
            # 64 images make 2 steps an epoch; a layout's first 3 steps are not measured: a re-plan after step 4.
            for name, replan in (("stayed", "never"), ("moved", "1")):
                checkpoints = self.path(f"replan_{name}.ck")
                out = run(*mpirun, "--strategy", "auto", "--load-profile", profile, "--epochs", 3, "--optimizer", "sgd",
                          "--momentum", 0.9, "--lr", 0.01, "--seed", 3, "--replan-every", replan, "--checkpoint-dir",
                          checkpoints).stdout
                self.assertEqual("re-plan after step 4" in out, replan != "never", out)
                params.append(ddl_tensors(os.path.join(checkpoints, "last.h5"))[2])
        finally:
            del os.environ["DDL_TEST_SLOW_LINKS"]
        self.assertLessEqual(numpy.abs(params[0] - params[1]).max(), 1e-5 * numpy.abs(params[0]).max())

    def test_bad_graphs_end_every_rank_with_one_line(self):
        torch.manual_seed(3)
        good = self.path("good.onnx")
        export(SmallCnn(), good, 13)
        with open(good, "rb") as f:
            data = f.read()
        truncated, garbage = self.path("truncated.onnx"), self.path("garbage.onnx")
        with open(truncated, "wb") as f:
            f.write(data[:len(data) // 2])
        with open(garbage, "wb") as f:
            f.write(b"not a model at all")
        folder = self.path("folder.onnx")
        os.makedirs(folder, exist_ok=True)
        for path, message in ((truncated, "truncated.onnx: "), (garbage, "garbage.onnx: "),
                              (self.path("missing.onnx"), "missing.onnx: cannot open: No such file or directory"),
                              (folder, "folder.onnx: a folder, not an ONNX file")):
            with self.subTest(path=os.path.basename(path)):
                result = run("mpirun", "--oversubscribe", "-np", 2, os.path.join(BIN, "ddl_train"), "--model", path,
                             "--train", self.data, "--epochs", 1, expect=None)
                self.assertNotEqual(result.returncode, 0)
                lines = sorted(line for line in result.stderr.splitlines() if line.startswith("ddl_train: error"))
                self.assertEqual([line[:27] for line in lines],  # one line a rank, as for any bad input
                                 ["ddl_train: error (rank 0): ", "ddl_train: error (rank 1): "], result.stderr)
                self.assertTrue(all(message in line for line in lines), result.stderr)
                self.assertIn("Exit code:    2", result.stderr)

    def test_a_graph_ddl_cannot_build_is_refused_in_one_line(self):
        class Cosine(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(3 * 32 * 32, 10)

            def forward(self, x):
                return self.fc(torch.flatten(torch.cos(x), 1))

        class SineAmongTokens(nn.Module):  # an operator ddl lacks inside what would be a piece
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(3, 10)

            def forward(self, x):
                tokens = x.flatten(2).transpose(1, 2)
                return self.fc((tokens + torch.sin(tokens.softmax(-1))).mean(1))

        class InBlocks(nn.Module):  # the refused node named by its module's path
            def __init__(self):
                super().__init__()
                self.blocks = nn.Sequential(nn.Identity(), Cosine())

            def forward(self, x):
                return self.blocks(x)

        class DilatedMaxPool(nn.Module):  # refused as the graph is built, not in the first step
            def __init__(self):
                super().__init__()
                self.pool = nn.MaxPool2d(3, 2, 1, dilation=2)
                self.fc = nn.Linear(3, 10)

            def forward(self, x):
                return self.fc(self.pool(x).mean([2, 3]))

        unsupported = "ddl does not support this operator (docs/onnx.md lists those it does)"
        for module, node, why in (
                (Cosine(), "Cos node in the network's own forward (/Cos, torch.cos)", unsupported),
                (SineAmongTokens(), "Sin node", unsupported),
                (InBlocks(), "Cos node in module blocks.1 (/blocks/blocks.1/Cos, torch.cos)", unsupported),
                (DilatedMaxPool(), "MaxPool node in module pool (/pool/MaxPool)", "ddl pools without dilations")):
            with self.subTest(module=type(module).__name__):
                onnx_file = self.path(f"{type(module).__name__}.onnx")
                export(module, onnx_file, 13)
                self.assert_refused(onnx_file, node, why)

    def test_an_eval_mode_export_is_refused_on_every_rank(self):
        """PyTorch folds an eval-mode export's BatchNorms into the convolutions, under names of its own: trained,
        that graph would be another network, its weights loading back into no module."""
        torch.manual_seed(5)
        model = randomize_batch_norms(SmallResNet()).eval()  # statistics of their own: no two biases alike
        onnx_file = self.path("eval_mode.onnx")
        torch.onnx.export(model, torch.zeros(2, 3, 32, 32), onnx_file, opset_version=13, input_names=["images"],
                          output_names=["logits"], dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}},
                          **ddl_torch.torchscript_exporter())
        self.assert_refused(onnx_file, "Conv node in module stem.0",
                            "has a name the exporter made, not the module's: the file was exported in eval mode")
        result = run("mpirun", "--oversubscribe", "-np", 2, os.path.join(BIN, "ddl_train"), "--model", onnx_file,
                     "--train", self.data, "--epochs", 1, expect=None)
        lines = sorted(line for line in result.stderr.splitlines() if line.startswith("ddl_train: error"))
        self.assertEqual([line[:27] for line in lines], ["ddl_train: error (rank 0): ", "ddl_train: error (rank 1): "],
                         result.stderr)
        self.assertTrue(all("do_constant_folding=False" in line for line in lines), result.stderr)
        self.assertIn("Exit code:    2", result.stderr)

    def assert_refused(self, onnx_file, node, why):
        """ddl_train ends before any step, with exit 2 and one line naming the file, the node and why."""
        result = run(os.path.join(BIN, "ddl_train"), "--model", onnx_file, "--train", self.data, "--epochs", 1, expect=2)
        lines = result.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, result.stderr)
        self.assertIn(f"{os.path.basename(onnx_file)}: ", lines[0])
        self.assertIn(node, lines[0])
        self.assertIn(why, lines[0])

if __name__ == "__main__":
    unittest.main(verbosity=2)
