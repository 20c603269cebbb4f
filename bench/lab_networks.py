"""Networks as labs write them, for the benchmarks that set ddl's graph operators against PyTorch's
(bench/onnx_vs_pytorch.sh, bench/torch_model_step.py): lab_unet(num_classes), an encoder-decoder of
convolutions, GroupNorms, ReLUs and upsampling (nearest and bilinear), with skip connections, pooled to a
classifier.
"""
import torch
from torch import nn
from torch.nn import functional as F


class Stage(nn.Module):
    """A 3x3 convolution, a GroupNorm of 8 groups and a ReLU."""

    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.norm = nn.GroupNorm(8, cout)

    def forward(self, x):
        return F.relu(self.norm(self.conv(x)))


class LabUNet(nn.Module):
    def __init__(self, num_classes=1000, width=32):
        super().__init__()
        self.down = nn.ModuleList([Stage(3, width), Stage(width, 2 * width, 2), Stage(2 * width, 4 * width, 2)])
        self.up1 = Stage(4 * width, 2 * width)
        self.up2 = Stage(2 * width, width)
        self.head = nn.Linear(width, num_classes)

    def forward(self, x):
        x1 = self.down[0](x)
        x2 = self.down[1](x1)
        x3 = self.down[2](x2)
        y = self.up1(F.interpolate(x3, scale_factor=2, mode="bilinear", align_corners=False)) + x2
        y = self.up2(F.interpolate(y, scale_factor=2, mode="nearest")) + x1
        return self.head(y.mean([2, 3]))


NETWORKS = {"lab_unet": LabUNet}


def lab_network(name, num_classes):
    return NETWORKS[name](num_classes)
