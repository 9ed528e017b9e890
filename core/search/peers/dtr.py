from .base import Peer


class DTR(Peer):
    name = "dtr"
