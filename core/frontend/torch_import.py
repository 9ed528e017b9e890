"""PyTorch -> Graph.

The forward pass, or the whole training step (forward, loss, backward producing every weight
gradient, optionally an SGD update), is captured with AOTAutograd's ``aot_export_module`` on fake
tensors: shapes and dtypes are exact, nothing is computed and no parameter memory is allocated, so
multi-billion-parameter models import on a laptop.  The captured graph is functional (buffer
mutations such as batch-norm running statistics become extra outputs), and every node is an aten
call, so any graph derived from it can be exported and run.

Module paths: AOTAutograd's joint trace does not keep ``nn_module_stack``, so each op's module path
is derived from parameter ownership -- an op that reads a parameter belongs to the module owning
it; a backward op that reads saved forward activations belongs to the deepest module common to
their producers; any other op to the deepest module common to the ops that produce its inputs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..ir import ops
from ..ir.graph import Graph, GraphError, Node, NodeKind, TensorKind, TensorMeta, TorchConst, TRef


class ImportErrorMAGIS(GraphError):
    """The model could not be captured (unsupported construct, bad inputs...)."""


@dataclass
class ImportStats:
    seconds: float
    fx_nodes: int


def _dtype_name(dt: torch.dtype) -> str:
    return str(dt).removeprefix("torch.")


def _const(v: Any) -> Any:
    if isinstance(v, torch.dtype):
        return TorchConst("dtype", _dtype_name(v))
    if isinstance(v, torch.device):
        return TorchConst("device", v.type)
    if isinstance(v, torch.layout):
        return TorchConst("layout", str(v).removeprefix("torch."))
    if isinstance(v, torch.memory_format):
        return TorchConst("memory_format", str(v).removeprefix("torch."))
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return type(v)(_const(x) for x in v)
    raise ImportErrorMAGIS(f"unsupported constant argument of type {type(v).__name__}: {v!r}")


def _meta_of(val: Any, kind: TensorKind) -> TensorMeta:
    if val is None:  # an output the op did not compute (e.g. a masked-off gradient)
        return TensorMeta((0,), "float32", kind)
    if not isinstance(val, torch.Tensor):
        raise ImportErrorMAGIS(f"non-tensor op output {type(val).__name__}")
    try:
        shape = tuple(int(s) for s in val.shape)
    except (TypeError, ValueError):
        raise ImportErrorMAGIS("dynamic shapes are not supported; give example inputs of fixed size") from None
    return TensorMeta(shape, _dtype_name(val.dtype), kind)


MAX_CONSTANT_ELEMENTS = 65536


def _constant_value(t: torch.Tensor, name: str) -> Any:
    """The value of a constant tensor as nested lists (the graph file embeds it)."""
    from torch._subclasses.fake_tensor import is_fake

    if is_fake(t) or t.device.type == "meta":
        raise ImportErrorMAGIS(f"constant tensor {name} was created under fake tensors; its value is unknown")
    if t.numel() > MAX_CONSTANT_ELEMENTS:
        raise ImportErrorMAGIS(f"constant tensor {name} has {t.numel()} elements; register it as a buffer")
    return t.detach().cpu().tolist()


class _TrainStep(nn.Module):
    def __init__(self, model: nn.Module, loss_fn: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.model = model
        self._loss_fn = loss_fn

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor]:
        return (self._loss_fn(self.model, *inputs),)


class _Forward(nn.Module):
    def __init__(self, model: nn.Module, forward_fn: Callable[..., Any] | None) -> None:
        super().__init__()
        self.model = model
        self._forward_fn = forward_fn

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self._forward_fn(self.model, *inputs) if self._forward_fn else self.model(*inputs)
        if isinstance(out, torch.Tensor):
            return (out,)
        if hasattr(out, "to_tuple"):
            out = out.to_tuple()
        return tuple(t for t in out if isinstance(t, torch.Tensor))


def _strip(name: str) -> str:
    return name.removeprefix("model.")


def capture(
    model: nn.Module,
    inputs: tuple[torch.Tensor, ...],
    loss_fn: Callable[..., torch.Tensor] | None = None,
    forward_fn: Callable[..., Any] | None = None,
    training: bool = True,
    name: str = "model",
    sgd_lr: float | None = None,
) -> Graph:
    """Capture ``model`` on example ``inputs`` as a Graph.

    training=True: forward + ``loss_fn(model, *inputs)`` + backward (gradients of every parameter
    that requires grad); ``sgd_lr`` appends a plain SGD update ``p - lr * grad``.
    training=False: the forward pass (``forward_fn(model, *inputs)`` or ``model(*inputs)``).
    Inputs may be real, fake or meta tensors; pass fake tensors for big models.
    """
    from torch._functorch.aot_autograd import aot_export_module

    if training and loss_fn is None:
        raise ImportErrorMAGIS("a training graph needs a loss function")
    t0 = time.perf_counter()
    wrapper: nn.Module = _TrainStep(model, loss_fn) if training else _Forward(model, forward_fn)
    try:
        if training:
            gm, sig = aot_export_module(wrapper, tuple(inputs), trace_joint=True, output_loss_index=0)
        else:
            with torch.no_grad():
                gm, sig = aot_export_module(wrapper, tuple(inputs), trace_joint=False)
    except Exception as e:  # torch raises many exception types while tracing
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ImportErrorMAGIS(f"could not capture the model: {type(e).__name__}: {msg}") from e
    g = _convert(gm, sig, training, name, inputs, _tied_parameters(model))
    if training and sgd_lr is not None:
        _append_sgd(g, sgd_lr)
    g.meta.update(
        {
            "mode": "train" if training else "forward",
            "capture_seconds": round(time.perf_counter() - t0, 3),
            "fx_nodes": len(gm.graph.nodes),
            "sgd_lr": sgd_lr,
        }
    )
    g.validate()
    return g


def _tied_parameters(model: nn.Module) -> dict[str, str]:
    """Tied weights: every extra name of a shared parameter -> its ``named_parameters()`` name."""
    canonical = {id(p): n for n, p in model.named_parameters()}
    return {n: canonical[id(p)] for n, p in model.named_parameters(remove_duplicate=False)
            if canonical.get(id(p), n) != n}


def _convert(gm: torch.fx.GraphModule, sig: Any, training: bool, name: str,
             inputs: tuple[torch.Tensor, ...], ties: dict[str, str] | None = None) -> Graph:
    """FX joint graph -> Graph.  A tied weight is one input under its ``named_parameters()`` name
    (AOTAutograd lists each alias name as its own input) and its gradient is the sum of the
    per-alias partial gradients, as eager autograd accumulates them."""
    ties = ties or {}
    g = Graph(name)
    env: dict[str, Any] = {}  # fx node name -> TRef or tuple of TRefs
    params = dict(sig.inputs_to_parameters)
    buffers = dict(sig.inputs_to_buffers)
    user_inputs = list(sig.user_inputs)

    def conv(a: Any) -> Any:
        if isinstance(a, torch.fx.Node):
            v = env[a.name]
            if isinstance(v, tuple):
                raise ImportErrorMAGIS(f"multi-output node {a.name} used without getitem")
            return v
        if isinstance(a, (list, tuple)):
            return type(a)(conv(x) for x in a)
        return _const(a)

    out_node = None
    param_nodes: dict[str, TRef] = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    # canonical parameters first, so that alias names can point at them
    placeholders.sort(key=lambda n: n.name in params and _strip(params[n.name]) in ties)
    for n in placeholders:
        if n.name in params and _strip(params[n.name]) in ties:
            canon = ties[_strip(params[n.name])]
            if canon not in param_nodes:
                raise ImportErrorMAGIS(f"tied parameter {params[n.name]} without its canonical {canon}")
            env[n.name] = param_nodes[canon]
            continue
        if n.name in params:
            target, kind = "param:" + _strip(params[n.name]), TensorKind.WEIGHT
        elif n.name in buffers:
            target, kind = "buffer:" + _strip(buffers[n.name]), TensorKind.WEIGHT
        elif n.name in user_inputs:
            target, kind = f"input:{user_inputs.index(n.name)}", TensorKind.INPUT
        else:
            raise ImportErrorMAGIS(f"unexpected graph input {n.name}")
        node = g.add_node(name=target.split(":", 1)[1] if kind != TensorKind.INPUT else
                          f"input_{user_inputs.index(n.name)}", op="placeholder",
                          kind=NodeKind.PLACEHOLDER, outputs=[_meta_of(n.meta["val"], kind)],
                          target=target)
        env[n.name] = TRef(node.id, 0)
        if kind == TensorKind.WEIGHT:
            param_nodes[target.split(":", 1)[1]] = env[n.name]
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            continue
        if n.op == "call_function":
            if n.target is __import__("operator").getitem:
                env[n.name] = env[n.args[0].name][n.args[1]]
                continue
            if not isinstance(n.target, torch._ops.OpOverload):
                raise ImportErrorMAGIS(f"unsupported call {n.target!r} in captured graph")
            op = str(n.target)
            val = n.meta.get("val")
            multi = isinstance(val, (tuple, list))
            vals = list(val) if multi else [val]
            args = [conv(a) for a in n.args]
            kwargs = {k: conv(v) for k, v in n.kwargs.items()}
            outs = [_meta_of(v, TensorKind.ACTIVATION) for v in vals]
            for j, src in enumerate(ops.output_aliases(op, len(outs))):
                if src is not None and src < len(args):
                    a = args[src]
                    if isinstance(a, TRef):
                        outs[j].alias = a
                    elif isinstance(a, (list, tuple)) and a and isinstance(a[0], TRef):
                        outs[j].alias = a[0]
            for j, nbytes in enumerate(ops.output_storage_bytes(op, args, kwargs, [
                    g.tensor(r) for r in _refs(args, kwargs)], outs)):
                if nbytes is not None and outs[j].alias is None:
                    outs[j].storage_bytes = nbytes
            node = g.add_node(name=n.name, op=op, args=args, kwargs=kwargs, outputs=outs)
            env[n.name] = tuple(node.refs()) if multi else TRef(node.id, 0)
        elif n.op == "get_attr":  # a constant tensor created by the model code (e.g. a mask fill value)
            value = getattr(gm, n.target)
            node = g.add_node(name=n.name, op="placeholder", kind=NodeKind.PLACEHOLDER,
                              outputs=[_meta_of(value, TensorKind.WEIGHT)], target=f"const:{n.name}",
                              kwargs={"value": _constant_value(value, n.name)})
            env[n.name] = TRef(node.id, 0)
        elif n.op == "output":
            out_node = n
        else:
            raise ImportErrorMAGIS(f"unsupported fx node kind {n.op} ({n.name})")
    assert out_node is not None
    outs = list(out_node.args[0])
    names = [o.name if isinstance(o, torch.fx.Node) else None for o in outs]
    mutated = dict(sig.buffers_to_mutate)
    grads = dict(sig.backward_signature.gradients_to_parameters) if training else {}
    n_mut = len(mutated)
    partial_grads: dict[str, list[TRef]] = {}
    for i, (o, nm) in enumerate(zip(outs, names, strict=True)):
        if o is None:
            continue
        ref = conv(o)
        if i < n_mut and nm in mutated:
            key = "buffer:" + _strip(mutated[nm])
        elif training and nm in grads and i >= n_mut + 1:
            pname = _strip(grads[nm])
            key = "grad:" + ties.get(pname, pname)
            partial_grads.setdefault(key, []).append(ref)
            continue
        elif training:
            key = "loss"
        else:
            key = f"output_{i - n_mut}"
        if key in g.outputs:
            key = f"{key}#{i}"
        g.outputs[key] = ref
    for key, refs in partial_grads.items():
        acc = refs[0]
        for k, r in enumerate(refs[1:]):
            t = g.tensor(acc)
            node = g.add_node(name=f"accumulate_grad_{key.split(':', 1)[1].replace('.', '_')}_{k}",
                              op="aten.add.Tensor", args=[acc, r],
                              outputs=[TensorMeta(t.shape, t.dtype, TensorKind.GRADIENT)])
            acc = TRef(node.id, 0)
        g.outputs[key] = acc
    _assign_kinds(g, training)
    _assign_modules(g)
    return g


def _refs(args: Any, kwargs: dict[str, Any]) -> list[TRef]:
    from ..ir.graph import _collect_refs

    found: list[TRef] = []
    _collect_refs(args, found)
    _collect_refs(list(kwargs.values()), found)
    return found


def _assign_kinds(g: Graph, training: bool) -> None:
    """Forward tensors are activations, backward ones gradients (training: forward = ancestors of the
    loss); graph outputs of a forward graph are 'output'."""
    fwd: set[int] = set()
    if training and "loss" in g.outputs:
        stack = [g.outputs["loss"].node]
        while stack:
            v = stack.pop()
            if v in fwd:
                continue
            fwd.add(v)
            stack.extend(g.preds(v))
    for n in g.ops():
        for t in n.outputs:
            t.kind = TensorKind.ACTIVATION if (not training or n.id in fwd) else TensorKind.GRADIENT
    for key, r in g.outputs.items():
        t = g.tensor(r)
        if key == "loss" or key.startswith("output_"):
            t.kind = TensorKind.OUTPUT
        elif key.startswith("buffer:"):
            t.kind = TensorKind.WEIGHT


def _common_prefix(paths: list[str]) -> str:
    if not paths:
        return ""
    parts = [p.split(".") for p in paths]
    out = []
    for comps in zip(*parts, strict=False):
        if all(c == comps[0] for c in comps):
            out.append(comps[0])
        else:
            break
    return ".".join(out)


def _assign_modules(g: Graph) -> None:
    for n in g.nodes.values():
        if n.kind == NodeKind.PLACEHOLDER:
            if n.target.startswith(("param:", "buffer:")):
                n.module = n.target.split(":", 1)[1].rpartition(".")[0]
            continue
        owners, saved, producers = [], [], []
        for r in n.inputs():
            root = g.nodes[g.storage_root(r).node]
            if root.kind == NodeKind.PLACEHOLDER and root.target.startswith(("param:", "buffer:")):
                owners.append(root.module)
            else:
                src = g.nodes[r.node]
                if src.kind != NodeKind.PLACEHOLDER and src.module:
                    producers.append(src.module)
                    if g.tensor(r).kind == TensorKind.ACTIVATION:
                        saved.append(src.module)
        backward = any(t.kind == TensorKind.GRADIENT for t in n.outputs)
        if owners:
            n.module = _common_prefix(owners)
        elif backward and saved:  # a backward op belongs where the activations it reads were made
            n.module = _common_prefix(saved)
        else:
            n.module = _common_prefix(producers)


def _append_sgd(g: Graph, lr: float) -> None:
    for key in sorted(k for k in g.outputs if k.startswith("grad:")):
        pname = key.split(":", 1)[1]
        p = next(n for n in g.placeholders() if n.target == "param:" + pname)
        gref = g.outputs[key]
        pm = p.out
        node = g.add_node(name=f"sgd_{pname.replace('.', '_')}", op="aten.add.Tensor",
                          args=[TRef(p.id, 0), gref], kwargs={"alpha": -lr},
                          outputs=[TensorMeta(pm.shape, pm.dtype, TensorKind.WEIGHT)],
                          module=p.module)
        g.outputs["param:" + pname] = TRef(node.id, 0)


def node_count(g: Graph) -> int:
    return sum(1 for n in g if n.kind != NodeKind.PLACEHOLDER)


__all__ = ["capture", "ImportErrorMAGIS", "Node"]
