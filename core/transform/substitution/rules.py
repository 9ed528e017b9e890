"""The substitution rules (TASO's A-Trans and I-Trans of MAGIS section 3, the rules the OCGGS paper
searches over), written as data: a source pattern, a target pattern and the outputs' mapping.

A-Trans (aggregation: fewer, larger kernels; may keep a merged result alive a little longer):
``merge_matmul`` / ``merge_matmul_rhs`` (two matmuls sharing an operand: one matmul on the
concatenated other operands, split of the result -- a transformer's Q/K/V projections, and on a
training step the weight-gradient matmuls that share an activation), ``merge_linear`` (the same for
``addmm`` with concatenated biases), ``merge_conv`` / ``merge_conv_nobias`` (two convolutions of
one input with equal stride, padding, dilation and kernel), ``merge_dwconv`` / ``merge_dwconv_nobias``
(two depthwise convolutions of one input: filters interleaved, one grouped convolution, the result
unbound -- a NAS cell's separable convolutions of one input), ``cse_relu`` (two ReLUs of one tensor), ``cat_relu`` (ReLU after a concat
instead of before each part), ``factor_mul`` (``a*c + b*c -> (a+b)*c``), ``fold_bn`` /
``fold_bn_nobias`` (batch norm folded into the preceding convolution; inference graphs only: it
rewrites parameters' values).

I-Trans (identities that open the way for others): ``enlarge_conv`` (zero-pad a k x k kernel to a
sibling convolution's larger K x K, so that the two become mergeable: OCGGS Fig. 1), ``split_relu``,
``distribute_mul``, ``cse_view`` / ``cse_t`` (two identical views of one tensor become one: a
transformer's Q, K and V projections each flatten the same activation), ``add_comm`` / ``mul_comm``, ``add_assoc`` / ``mul_assoc``, ``transpose_mm``
(``(AB)^T -> B^T A^T``) and ``mm_transpose`` (``A^T B^T -> (BA)^T``).

A merged result is split with ``split_with_sizes``, whose parts are views of it; a part along a
dimension other than the first is strided, so a rule that makes one checks that every ``view`` of
the part only splits dimensions (a view that merges them needs contiguous memory).
"""

from __future__ import annotations

from collections.abc import Iterable

from ...ir.graph import Graph, NodeKind, TRef
from .pattern import Fn, In, Match, Opt, Ref, Substitution, Var, pop

CONV = "convolution.default"
VIEW_OPS = ("aten.view.default", "aten._unsafe_view.default")


def splits_only(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Whether a view from shape ``a`` to ``b`` only splits dimensions (each dimension of ``a`` of
    size > 1 is the product of consecutive dimensions of ``b``), so it works on any strides."""
    a = [x for x in a if x != 1]
    b = [x for x in b if x != 1]
    j = 0
    for x in a:
        p = 1
        while p < x and j < len(b):
            p *= b[j]
            j += 1
        if p != x:
            return False
    return j == len(b)


def part_safe(g: Graph, ref: TRef, dim: int) -> bool:
    """A tensor that is to become part ``dim`` of a split can be read as a strided view: it is
    contiguous anyway (every dimension before ``dim`` is 1), or every view op reading it (and
    every view of those) only splits dimensions."""
    shape = g.tensor(ref).shape
    if all(s == 1 for s in shape[:dim]):
        return True
    stack = [ref]
    while stack:
        r = stack.pop()
        for u in g.readers(r):
            n = g.nodes[u]
            if n.op in VIEW_OPS:
                if not splits_only(g.tensor(r).shape, n.outputs[0].shape):
                    return False
                stack.append(TRef(u, 0))
    return True


def _same_dtype(*names: str):
    def guard(m: Match) -> bool:
        return len({m.meta(n).dtype for n in names}) == 1
    return guard


def _split(d: int, *parts: str) -> Fn:
    return Fn(lambda m: [m.shape(p)[d] for p in parts])


def _all(*guards):
    return lambda m: all(gd(m) for gd in guards)


def _parts_safe(dim: int, *names: str):
    return lambda m: all(part_safe(m.g, TRef(m.nodes[n], 0), dim) for n in names)


def _same_shapes(*names: str):
    return lambda m: len({m.shape(n) for n in names}) == 1


# ---- A-Trans -------------------------------------------------------------------------------------
MERGE_MATMUL = Substitution(
    "merge_matmul", "A-Trans: two matmuls sharing the left operand become one on concatenated right operands",
    "A-Trans",
    source=(pop("y1", "mm.default", In("A"), In("B1")), pop("y2", "mm.default", In("A"), In("B2"))),
    target=(pop("b", "cat.default", [In("B1"), In("B2")], 1), pop("y", "mm.default", In("A"), Ref("b")),
            pop("s", "split_with_sizes.default", Ref("y"), _split(1, "y1", "y2"), 1)),
    outputs=((Ref("y1"), Ref("s", 0)), (Ref("y2"), Ref("s", 1))),
    unordered=((0, 1),), guard=_all(_same_dtype("B1", "B2"), _parts_safe(1, "y1", "y2")))

MERGE_MATMUL_RHS = Substitution(
    "merge_matmul_rhs", "A-Trans: two matmuls sharing the right operand become one on stacked left operands",
    "A-Trans",
    source=(pop("y1", "mm.default", In("A1"), In("B")), pop("y2", "mm.default", In("A2"), In("B"))),
    target=(pop("a", "cat.default", [In("A1"), In("A2")]), pop("y", "mm.default", Ref("a"), In("B")),
            pop("s", "split_with_sizes.default", Ref("y"), _split(0, "y1", "y2"))),
    outputs=((Ref("y1"), Ref("s", 0)), (Ref("y2"), Ref("s", 1))),
    unordered=((0, 1),), guard=_same_dtype("A1", "A2"))


def _vectors(*names: str):
    return lambda m: all(len(m.shape(n)) == 1 for n in names)


MERGE_LINEAR = Substitution(
    "merge_linear", "A-Trans: two linear layers of one input become one on concatenated weights and biases",
    "A-Trans",
    source=(pop("y1", "addmm.default", In("c1"), In("X"), In("W1")),
            pop("y2", "addmm.default", In("c2"), In("X"), In("W2"))),
    target=(pop("c", "cat.default", [In("c1"), In("c2")]), pop("w", "cat.default", [In("W1"), In("W2")], 1),
            pop("y", "addmm.default", Ref("c"), In("X"), Ref("w")),
            pop("s", "split_with_sizes.default", Ref("y"), _split(1, "y1", "y2"), 1)),
    outputs=((Ref("y1"), Ref("s", 0)), (Ref("y2"), Ref("s", 1))),
    unordered=((0, 1),),
    guard=_all(_vectors("c1", "c2"), _same_dtype("W1", "W2", "c1", "c2"), _parts_safe(1, "y1", "y2")))


def _conv(name: str, x, w, b):
    return pop(name, CONV, x, w, b, Var("s"), Var("p"), Var("d"), False, Var("op"), 1)


def _same_kernel(m: Match) -> bool:
    return m.shape("W1")[1:] == m.shape("W2")[1:] and m.meta("W1").dtype == m.meta("W2").dtype


MERGE_CONV = Substitution(
    "merge_conv", "A-Trans: two convolutions of one input become one with concatenated filters",
    "A-Trans",
    source=(_conv("y1", In("X"), In("W1"), In("b1")), _conv("y2", In("X"), In("W2"), In("b2"))),
    target=(pop("w", "cat.default", [In("W1"), In("W2")]), pop("b", "cat.default", [In("b1"), In("b2")]),
            _conv("y", In("X"), Ref("w"), Ref("b")),
            pop("s", "split_with_sizes.default", Ref("y"), _split(1, "y1", "y2"), 1)),
    outputs=((Ref("y1"), Ref("s", 0)), (Ref("y2"), Ref("s", 1))),
    unordered=((0, 1),), guard=_all(_same_kernel, _parts_safe(1, "y1", "y2")))

MERGE_CONV_NOBIAS = Substitution(
    "merge_conv_nobias", "A-Trans: two bias-free convolutions of one input become one with concatenated filters",
    "A-Trans",
    source=(_conv("y1", In("X"), In("W1"), None), _conv("y2", In("X"), In("W2"), None)),
    target=(pop("w", "cat.default", [In("W1"), In("W2")]), _conv("y", In("X"), Ref("w"), None),
            pop("s", "split_with_sizes.default", Ref("y"), _split(1, "y1", "y2"), 1)),
    outputs=((Ref("y1"), Ref("s", 0)), (Ref("y2"), Ref("s", 1))),
    unordered=((0, 1),), guard=_all(_same_kernel, _parts_safe(1, "y1", "y2")))

CAT_RELU = Substitution(
    "cat_relu", "A-Trans: one ReLU after a concat instead of one on each part", "A-Trans",
    source=(pop("r1", "relu.default", In("A")), pop("r2", "relu.default", In("B")),
            pop("c", "cat.default", [Ref("r1"), Ref("r2")], Var("d"))),
    target=(pop("c2", "cat.default", [In("A"), In("B")], Var("d")), pop("r", "relu.default", Ref("c2"))),
    outputs=((Ref("c"), Ref("r")),))

FACTOR_MUL = Substitution(
    "factor_mul", "A-Trans: a*c + b*c becomes (a+b)*c", "A-Trans",
    source=(pop("m1", "mul.Tensor", In("A"), In("C")), pop("m2", "mul.Tensor", In("B"), In("C")),
            pop("s", "add.Tensor", Ref("m1"), Ref("m2"))),
    target=(pop("a", "add.Tensor", In("A"), In("B")), pop("m", "mul.Tensor", Ref("a"), In("C"))),
    outputs=((Ref("s"), Ref("m")),), guard=_same_shapes("A", "B", "s"))


def _bn(name: str, x):
    return pop(name, "_native_batch_norm_legit_no_training.default", x, In("g"), In("beta"), In("mean"),
               In("var"), Var("mom"), Var("eps"))


def _scale_ops():
    """The per-channel scale gamma / sqrt(var + eps) and the folded filter."""
    return (pop("e", "add.Scalar", In("var"), Var("eps")), pop("r", "rsqrt.default", Ref("e")),
            pop("sc", "mul.Tensor", In("g"), Ref("r")),
            pop("sv", "view.default", Ref("sc"), Fn(lambda m: [-1] + [1] * (len(m.shape("W")) - 1))),
            pop("w", "mul.Tensor", In("W"), Ref("sv")))


FOLD_BN = Substitution(
    "fold_bn", "A-Trans: batch norm folded into the preceding convolution's filter and bias (inference)",
    "A-Trans",
    source=(_conv("y", In("X"), In("W"), In("b")), _bn("z", Ref("y"))),
    target=(*_scale_ops(), pop("bd", "sub.Tensor", In("b"), In("mean")), pop("bm", "mul.Tensor", Ref("bd"), Ref("sc")),
            pop("nb", "add.Tensor", Ref("bm"), In("beta")), _conv("y2", In("X"), Ref("w"), Ref("nb"))),
    outputs=((Ref("z"), Ref("y2")),), training=False)

FOLD_BN_NOBIAS = Substitution(
    "fold_bn_nobias", "A-Trans: batch norm folded into the preceding bias-free convolution (inference)", "A-Trans",
    source=(_conv("y", In("X"), In("W"), None), _bn("z", Ref("y"))),
    target=(*_scale_ops(), pop("bm", "mul.Tensor", In("mean"), Ref("sc")),
            pop("nb", "sub.Tensor", In("beta"), Ref("bm")), _conv("y2", In("X"), Ref("w"), Ref("nb"))),
    outputs=((Ref("z"), Ref("y2")),), training=False)


# ---- I-Trans -------------------------------------------------------------------------------------
ENLARGE_MAX = 7


def _square_odd(shape: tuple[int, ...]) -> int | None:
    return shape[2] if len(shape) == 4 and shape[2] == shape[3] and shape[2] % 2 == 1 else None


def _enlarge_sizes(m: Match) -> Iterable[tuple[int]]:
    """Kernel sizes K of sibling convolutions (same input, groups, channels per group and stride,
    dilation 1, 'same' padding K // 2) larger than this one's k, so that zero-padding this filter
    to K x K makes the two mergeable."""
    g = m.g
    w = m.shape("W")
    k = _square_odd(w)
    if k is None or m.values["p"] != [k // 2] * 2 or m.values["d"] != [1, 1]:
        return []
    x = m.tensors["X"]
    ks: set[int] = set()
    for u in g.readers(x):
        n = g.nodes[u]
        if u == m.nodes["y"] or n.op != "aten." + CONV or n.kind != NodeKind.OP or n.args[0] != x:
            continue
        sw = g.tensor(n.args[1]).shape
        big = _square_odd(sw)
        if (big is not None and k < big <= ENLARGE_MAX and n.args[8] == m.values["g"] and sw[1] == w[1]
                and n.args[3] == m.values["s"] and n.args[5] == [1, 1] and n.args[4] == [big // 2] * 2
                and n.args[6] is False):
            ks.add(big)
    return [(big,) for big in sorted(ks)]


def _grow(m: Match) -> int:
    return (m.extra[0] - m.shape("W")[2]) // 2


ENLARGE_CONV = Substitution(
    "enlarge_conv", "I-Trans: a k x k filter zero-padded to a sibling convolution's larger K x K (then mergeable)",
    "I-Trans",
    source=(pop("y", CONV, In("X"), In("W"), Opt("b"), Var("s"), Var("p"), Var("d"), False, Var("op"), Var("g")),),
    target=(pop("w", "constant_pad_nd.default", In("W"), Fn(lambda m: [_grow(m)] * 4), 0.0),
            pop("y2", CONV, In("X"), Ref("w"), Opt("b"), Var("s"), Fn(lambda m: [m.extra[0] // 2] * 2), Var("d"),
                False, Var("op"), Var("g"))),
    outputs=((Ref("y"), Ref("y2")),), extras=_enlarge_sizes)


def _depthwise(m: Match) -> bool:
    w1, w2 = m.shape("W1"), m.shape("W2")
    c = m.shape("X")[1]
    return (w1 == w2 and len(w1) == 4 and w1[0] == c == m.values["g"] > 1 and w1[1] == 1
            and m.meta("W1").dtype == m.meta("W2").dtype)


def _dw(name: str, w, b):
    return pop(name, CONV, In("X"), w, b, Var("s"), Var("p"), Var("d"), False, Var("op"), Var("g"))


def _dw_target(bias: bool) -> tuple:
    two = Fn(lambda m: [2 * m.shape("W1")[0], *m.shape("W1")[1:]])
    ops = [pop("ws", "stack.default", [In("W1"), In("W2")], 1), pop("w", "view.default", Ref("ws"), two)]
    if bias:
        ops += [pop("bs", "stack.default", [In("b1"), In("b2")], 1),
                pop("b", "view.default", Ref("bs"), Fn(lambda m: [2 * m.shape("b1")[0]]))]
    ops += [_dw("y", Ref("w"), Ref("b") if bias else None),
            pop("yv", "view.default", Ref("y"),
                Fn(lambda m: [m.shape("y1")[0], m.shape("y1")[1], 2, *m.shape("y1")[2:]])),
            pop("u", "unbind.int", Ref("yv"), 2)]
    return tuple(ops)


def _parts_select_safe(m: Match) -> bool:
    return all(part_safe(m.g, TRef(m.nodes[n], 0), 1) for n in ("y1", "y2"))


MERGE_DWCONV = Substitution(
    "merge_dwconv", "A-Trans: two depthwise convolutions of one input become one with interleaved filters",
    "A-Trans",
    source=(_dw("y1", In("W1"), In("b1")), _dw("y2", In("W2"), In("b2"))),
    target=_dw_target(True), outputs=((Ref("y1"), Ref("u", 0)), (Ref("y2"), Ref("u", 1))),
    unordered=((0, 1),), guard=_all(_depthwise, _parts_select_safe))

MERGE_DWCONV_NOBIAS = Substitution(
    "merge_dwconv_nobias", "A-Trans: two bias-free depthwise convolutions of one input become one", "A-Trans",
    source=(_dw("y1", In("W1"), None), _dw("y2", In("W2"), None)),
    target=_dw_target(False), outputs=((Ref("y1"), Ref("u", 0)), (Ref("y2"), Ref("u", 1))),
    unordered=((0, 1),), guard=_all(_depthwise, _parts_select_safe))


def _cse1(name: str, op: str) -> Substitution:
    return Substitution(
        name, f"A-Trans: two identical {op.split('.')[0]} ops of one tensor become one", "A-Trans",
        source=(pop("y1", op, In("X")), pop("y2", op, In("X"))), target=(pop("y", op, In("X")),),
        outputs=((Ref("y1"), Ref("y")), (Ref("y2"), Ref("y"))), unordered=((0, 1),))


CSE_RELU = _cse1("cse_relu", "relu.default")

SPLIT_RELU = Substitution(
    "split_relu", "I-Trans: a ReLU after a concat becomes one ReLU on each part", "I-Trans",
    source=(pop("c", "cat.default", [In("A"), In("B")], Var("d")), pop("r", "relu.default", Ref("c"))),
    target=(pop("r1", "relu.default", In("A")), pop("r2", "relu.default", In("B")),
            pop("c2", "cat.default", [Ref("r1"), Ref("r2")], Var("d"))),
    outputs=((Ref("r"), Ref("c2")),))

DISTRIBUTE_MUL = Substitution(
    "distribute_mul", "I-Trans: (a+b)*c becomes a*c + b*c", "I-Trans",
    source=(pop("a", "add.Tensor", In("A"), In("B")), pop("m", "mul.Tensor", Ref("a"), In("C"))),
    target=(pop("m1", "mul.Tensor", In("A"), In("C")), pop("m2", "mul.Tensor", In("B"), In("C")),
            pop("s", "add.Tensor", Ref("m1"), Ref("m2"))),
    outputs=((Ref("m"), Ref("s")),), guard=_same_shapes("A", "B", "m"))


def _commute(name: str, op: str, what: str) -> Substitution:
    return Substitution(
        name, f"I-Trans: {what} commutes (a {'+' if op == 'add' else '*'} b = b {'+' if op == 'add' else '*'} a)",
        "I-Trans", source=(pop("y", f"{op}.Tensor", In("A"), In("B")),),
        target=(pop("y2", f"{op}.Tensor", In("B"), In("A")),), outputs=((Ref("y"), Ref("y2")),),
        guard=lambda m: m.tensors["A"] != m.tensors["B"] and m.meta("A").dtype == m.meta("B").dtype)


def _associate(name: str, op: str) -> Substitution:
    sym = "+" if op == "add" else "*"
    return Substitution(
        name, f"I-Trans: (a {sym} b) {sym} c becomes a {sym} (b {sym} c)", "I-Trans",
        source=(pop("i", f"{op}.Tensor", In("A"), In("B")), pop("o", f"{op}.Tensor", Ref("i"), In("C"))),
        target=(pop("i2", f"{op}.Tensor", In("B"), In("C")), pop("o2", f"{op}.Tensor", In("A"), Ref("i2"))),
        outputs=((Ref("o"), Ref("o2")),), guard=_same_shapes("A", "B", "C"))


ADD_COMM = _commute("add_comm", "add", "addition")
MUL_COMM = _commute("mul_comm", "mul", "multiplication")
ADD_ASSOC = _associate("add_assoc", "add")
MUL_ASSOC = _associate("mul_assoc", "mul")


def _no_merging_views(m: Match) -> bool:
    return part_safe(m.g, TRef(m.nodes["y"], 0), 1)


TRANSPOSE_MM = Substitution(
    "transpose_mm", "I-Trans: (AB)^T becomes B^T A^T", "I-Trans",
    source=(pop("y", "mm.default", In("A"), In("B")), pop("z", "t.default", Ref("y"))),
    target=(pop("tb", "t.default", In("B")), pop("ta", "t.default", In("A")),
            pop("z2", "mm.default", Ref("tb"), Ref("ta"))),
    outputs=((Ref("z"), Ref("z2")),))

MM_TRANSPOSE = Substitution(
    "mm_transpose", "I-Trans: A^T B^T becomes (BA)^T", "I-Trans",
    source=(pop("ta", "t.default", In("A")), pop("tb", "t.default", In("B")),
            pop("y", "mm.default", Ref("ta"), Ref("tb"))),
    target=(pop("p", "mm.default", In("B"), In("A")), pop("z", "t.default", Ref("p"))),
    outputs=((Ref("y"), Ref("z")),), guard=_no_merging_views)

def _cse(name: str, op: str) -> Substitution:
    return Substitution(
        name, f"I-Trans: two identical {op.split('.')[0]} ops of one tensor become one", "I-Trans",
        source=(pop("y1", op, In("X"), Var("s")), pop("y2", op, In("X"), Var("s"))),
        target=(pop("y", op, In("X"), Var("s")),), outputs=((Ref("y1"), Ref("y")), (Ref("y2"), Ref("y"))),
        unordered=((0, 1),))


CSE_VIEW = _cse("cse_view", "view.default")
CSE_T = Substitution(
    "cse_t", "I-Trans: two transposes of one matrix become one", "I-Trans",
    source=(pop("y1", "t.default", In("X")), pop("y2", "t.default", In("X"))),
    target=(pop("y", "t.default", In("X")),), outputs=((Ref("y1"), Ref("y")), (Ref("y2"), Ref("y"))),
    unordered=((0, 1),))

SUBSTITUTIONS: tuple[Substitution, ...] = (
    MERGE_MATMUL, MERGE_MATMUL_RHS, MERGE_LINEAR, MERGE_CONV, MERGE_CONV_NOBIAS, CAT_RELU, FACTOR_MUL, FOLD_BN,
    FOLD_BN_NOBIAS, ENLARGE_CONV, SPLIT_RELU, DISTRIBUTE_MUL, ADD_COMM, MUL_COMM, ADD_ASSOC, MUL_ASSOC,
    TRANSPOSE_MM, MM_TRANSPOSE, CSE_VIEW, CSE_T, CSE_RELU, MERGE_DWCONV, MERGE_DWCONV_NOBIAS,
)
