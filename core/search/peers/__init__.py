"""The peer methods of the M-Optimizer's comparison (issue 12), one file each, all on our graph
IR, our simulator and our device profile, all returning ``core.search.plan.Plan`` points whose
applications are our own rules (rematerialisation is ``remat``), so that every point replays,
exports and verifies like any plan:

* ``eager`` -- PyTorch's traced order, no transformation (the baseline of every ratio);
* ``microbatch`` -- gradient accumulation over k parts of the batch (fission of the whole step);
* ``offload`` -- ``torch.autograd.graph.save_on_cpu``: saved activations in host memory (swaps);
* ``microbatch_ckpt``, ``offload_ckpt`` -- each of those two combined with checkpointing (cheap ops
  or sqrt(n) segments recomputed), as a user tunes them by hand;
* ``sqrt_n`` -- Chen et al. 2016, segment checkpointing;
* ``dtr`` -- Kirisame et al. ICLR'21, Dynamic Tensor Rematerialization under a budget sweep;
* ``checkmate`` -- Jain et al. MLSys'20, the optimal rematerialisation MILP (scipy's HiGHS);
* ``torch_mincut`` -- AOTAutograd's min-cut partitioner run by torch on the joint graph.

Each is a ``base.Method``; the registry of every method, these included, is ``search.methods``:
``METHODS[name].run(g, cost, time_budget=..., progress=..., **options) -> MethodRun``.
"""

from __future__ import annotations

from .base import Method, MethodRun, eager_peak
from .checkmate import Checkmate
from .common import Failure
from .dtr import DTR
from .eager import Eager
from .microbatch import Microbatch
from .microbatch_ckpt import MicrobatchCkpt
from .offload import Offload
from .offload_ckpt import OffloadCkpt
from .sqrt_n import SqrtN
from .torch_mincut import TorchMinCut

__all__ = ["DTR", "Checkmate", "Eager", "Failure", "Method", "MethodRun", "Microbatch", "MicrobatchCkpt", "Offload",
           "OffloadCkpt", "SqrtN", "TorchMinCut", "eager_peak"]
