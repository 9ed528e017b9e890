"""Model files a user would write (``magis import path/model.py:build``), as text for tests to
write to disk."""

MLP_FACTORY = '''
import torch
from torch import nn


class Workload:
    def __init__(self):
        self.module = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        self.inputs = (torch.randn(3, 8),)

    @staticmethod
    def loss_fn(module, x):
        return module(x).square().mean()


def build():
    return Workload()
'''

# a small CNN with residual blocks: ``magis import my_cnn.py:build --forward`` gives a graph that layer
# fusion (``magis fuse``) has work on under a 128 KiB buffer
CNN_FACTORY = '''
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1)
        self.bn = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return torch.relu(x + self.conv2(torch.relu(self.bn(self.conv1(x)))))


class Workload:
    def __init__(self):
        self.module = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), Block(32),
                                    nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(), Block(64),
                                    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
        self.inputs = (torch.randn(1, 3, 64, 64), torch.randint(0, 10, (1,)))

    @staticmethod
    def loss_fn(module, x, y):
        return nn.functional.cross_entropy(module(x), y)

    @staticmethod
    def forward_fn(module, x, y):
        return module(x)


def build():
    return Workload()
'''
