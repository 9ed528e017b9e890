from .base import Peer


class TorchMinCut(Peer):
    name = "torch_mincut"
