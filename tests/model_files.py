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
