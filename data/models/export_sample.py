"""Writes data/models/se_resnet_sample.onnx, the repository's sample of a user's own network: a small CNN for
32x32 images with a residual block whose body ends in a squeeze-and-excitation block (SE-ResNet's), as a PyTorch user would write it and
export it for ddl_train --model (torch.onnx.export in training mode, opset 13, its batch free).
    /usr/bin/python3 data/models/export_sample.py [OUTPUT.onnx]
"""
import inspect
import os
import sys

import torch
from torch import nn


class SqueezeExcitation(nn.Module):
    def __init__(self, channels, reduced):
        super().__init__()
        self.squeeze = nn.Conv2d(channels, reduced, 1)
        self.excite = nn.Conv2d(reduced, channels, 1)

    def forward(self, x):
        s = nn.functional.adaptive_avg_pool2d(x, 1)
        return x * torch.sigmoid(self.excite(torch.relu(self.squeeze(s))))


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.se = SqueezeExcitation(cout, cout // 4)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.se(self.bn2(self.conv2(y))) + self.shortcut(x))


class SampleNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2))
        self.block = Block(32, 64, 2)
        self.head = nn.Linear(64, classes)

    def forward(self, x):
        x = self.block(self.stem(x))
        x = nn.functional.adaptive_avg_pool2d(x, 1)
        return self.head(torch.flatten(x, 1))


def main():
    output = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                 "se_resnet_sample.onnx")
    torch.manual_seed(1)
    model = SampleNet().train()
    torch.onnx.export(model, torch.zeros(2, 3, 32, 32), output, opset_version=13,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=["images"], output_names=["logits"],
                      dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}},
                      # PyTorch 2.9 and later export through dynamo by default, at opsets ddl does not read
                      **({"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}))
    print(f"wrote {output}: {sum(p.numel() for p in model.parameters())} parameters")


if __name__ == "__main__":
    main()
