"""Tiny aten graphs built by hand (float32) -- the MLP of the fission tests -- and the run of an
MLP's exported script against eager PyTorch."""

from __future__ import annotations

import torch

from core.codegen.emit import generate_source
from core.codegen.verify import load_script
from core.ir.graph import Graph, NodeKind, TensorKind, TensorMeta, TRef
from core.schedule import get_scheduler
from core.simulate import simulate


class G:
    """A tiny aten graph built by hand (float32)."""

    def __init__(self) -> None:
        self.g = Graph("hand", {"mode": "train"})
        self.k = 0

    def input(self, name: str, shape: tuple[int, ...], weight: bool = False) -> TRef:
        kind = TensorKind.WEIGHT if weight else TensorKind.INPUT
        target = f"param:{name}" if weight else f"input:{self.k}"
        self.k += not weight
        n = self.g.add_node(name=name, op="placeholder", kind=NodeKind.PLACEHOLDER,
                            outputs=[TensorMeta(shape, "float32", kind)], target=target)
        return TRef(n.id, 0)

    def op(self, name: str, op: str, args: list, shape: tuple[int, ...], output: bool = False) -> TRef:
        n = self.g.add_node(name=name, op=op, args=args, outputs=[TensorMeta(shape, "float32")])
        if output:
            self.g.outputs[name] = TRef(n.id, 0)
        return TRef(n.id, 0)


def mlp() -> tuple[Graph, dict[str, TRef]]:
    """y = relu(x @ w1) @ w2 with a batch of 8: the 8x64 intermediates are 16x the output."""
    b = G()
    x = b.input("x", (8, 4))
    w1 = b.input("w1", (4, 64), weight=True)
    w2 = b.input("w2", (64, 4), weight=True)
    a = b.op("a", "aten.mm.default", [x, w1], (8, 64))
    r = b.op("r", "aten.relu.default", [a], (8, 64))
    y = b.op("y", "aten.mm.default", [r, w2], (8, 4), output=True)
    return b.g, {"x": x, "w1": w1, "w2": w2, "a": a, "r": r, "y": y}


def run_mlp_script(g: Graph, tmp_path) -> tuple[str, int, int]:
    """Export ``g`` (an MLP of ``mlp()``, transformed) in the traced order, run it on random inputs,
    check y = relu(x @ w1) @ w2; returns the script, its measured peak and the simulated one."""
    order = get_scheduler("traced").run(g).order
    src = generate_source(g, order)
    path = tmp_path / "plan.py"
    path.write_text(src)
    mod = load_script(path)
    torch.manual_seed(0)
    x, w1, w2 = torch.randn(8, 4), torch.randn(4, 64), torch.randn(64, 4)
    out, mem = mod.measure({"input_0": x, "w1": w1, "w2": w2}, "cpu")
    torch.testing.assert_close(out["y"], torch.relu(x @ w1) @ w2)
    return src, mem["measured_peak_bytes"], simulate(g, order).peak
