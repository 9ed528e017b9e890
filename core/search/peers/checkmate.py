from .base import Peer


class Checkmate(Peer):
    name = "checkmate"
