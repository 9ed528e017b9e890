"""The validity classifier of GET (paper section III-B, Eq. 3) and the explainers that run on it.

A k-GNN (Morris et al. 2019, the 1-GNN layer ``h'_v = relu(W_1 h_v + W_2 sum_{u in N(v)} m_uv h_u)``),
4 layers of hidden size 128, sum pooling and a two-layer head, predicts whether a fusion group is
*invalid* under a buffer beta.  Node features are an op's sizes as fractions of beta (its weights,
its line buffers, its output line, the line of a tensor it shares with another reader), its kernel
height, its degrees inside the group, whether it gates a squeeze-excite inside the group, and its op
class; so one model serves every beta of a scheme.  ``m_uv`` is an edge mask, 1 for the plain
prediction: the explainers learn it (GNNExplainer) or differentiate through it (gradient saliency).
A node's pooled embedding is weighted by the mean mask of its edges, so masking every edge of an op
removes it from the explanation subgraph.

Training data: groups sampled from the problems' graphs (random windows of the topological order,
their weakly connected components) with beta drawn log-uniformly in [32 KiB, 2 MiB] or near the group's own need, labelled by
F_beta; 20% are held out and the model's held-out accuracy is reported.  Training (6,000 groups, 40
epochs of Adam under a one-cycle learning-rate schedule) takes about a minute on one CPU core; the
weights are cached on disk (``$MAGIS_CACHE`` or ``~/.cache/magis``, ``fusion/``) keyed by the graphs,
the scheme and the settings, so a graph trains once.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .problem import OP_CLASSES, FusionProblem, Group
from .split import Edge, Explainer

MODEL_VERSION = 3
N_FEATURES = 10 + len(OP_CLASSES)


def group_tensors(problem: FusionProblem, group: Group, beta: float) -> tuple[torch.Tensor, torch.Tensor, list[Edge]]:
    """(node features [k, F], edge index [2, E] local, the edges as problem positions)."""
    nodes = sorted(group)
    local = {v: i for i, v in enumerate(nodes)}
    edges = [(u, v) for v in nodes for u in problem.preds[v] if u in group]
    shared = problem._shared_reads(group)
    x = np.zeros((len(nodes), N_FEATURES), dtype=np.float32)
    for i, v in enumerate(nodes):
        w = sum(problem.weight_bytes[k] for k in problem.weights[v])
        out_line = sum(problem.tensor_line[t] for t in problem.writes[v])
        share = sum(problem.tensor_line[t] for t in problem.reads[v] if t in shared)
        share += sum(problem.tensor_line[t] for t in problem.writes[v] if t in shared)
        indeg = sum(1 for u in problem.preds[v] if u in group)
        outdeg = sum(1 for u in problem.succs[v] if u in group)
        gate = problem.kind[v] == "binary" and any(
            problem.tensor_gate[t] and problem.tensor_producer[t] in group for t in problem.reads[v])
        ext = any(problem.tensor_producer[t] not in group for t in problem.reads[v])
        x[i, :10] = [w / beta, problem.layer_line(v) / beta, out_line / beta, share / beta,
                     math.log2(1 + w) / 32, problem.kh[v] / 7, indeg / 2, outdeg / 2, float(gate), float(ext)]
        x[i, 10 + OP_CLASSES.index(problem.kind[v])] = 1.0
    ei = torch.tensor([[local[u] for u, _ in edges], [local[v] for _, v in edges]], dtype=torch.long)
    return torch.from_numpy(x), ei.reshape(2, len(edges)), edges


class KGNN(nn.Module):
    """1-GNN layers, sum pooling, a head giving the logit of "invalid"."""

    def __init__(self, n_in: int = N_FEATURES, hidden: int = 128, layers: int = 4) -> None:
        super().__init__()
        self.inp = nn.Linear(n_in, hidden)
        self.self_lin = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(layers))
        self.nbr_lin = nn.ModuleList(nn.Linear(hidden, hidden, bias=False) for _ in range(layers))
        self.head = nn.Sequential(nn.Linear(hidden, hidden // 2), nn.ReLU(), nn.Linear(hidden // 2, 1))

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor, n_graphs: int,
                edge_mask: torch.Tensor | None = None) -> torch.Tensor:
        src, dst = edge_index
        m = torch.ones(src.shape[0], dtype=x.dtype) if edge_mask is None else edge_mask
        s2, d2, m2 = torch.cat([src, dst]), torch.cat([dst, src]), torch.cat([m, m])  # both directions
        h = torch.relu(self.inp(x))
        for ls, ln in zip(self.self_lin, self.nbr_lin, strict=True):
            agg = torch.zeros_like(h).index_add(0, d2, h[s2] * m2[:, None])
            h = torch.relu(ls(h) + ln(agg))
        if edge_mask is not None:  # a node counts as much as the mean mask of its edges
            deg = torch.zeros(x.shape[0], dtype=x.dtype).index_add(0, d2, torch.ones_like(m2))
            node = torch.zeros(x.shape[0], dtype=x.dtype).index_add(0, d2, m2) / deg.clamp(min=1)
            node = torch.where(deg > 0, node, torch.ones_like(node))
            h = h * node[:, None]
        pooled = torch.zeros(n_graphs, h.shape[1], dtype=h.dtype).index_add(0, batch, h)
        return self.head(pooled).squeeze(-1)


@dataclass
class ValidityModel:
    """A trained classifier and how well it does on held-out groups."""

    net: KGNN
    scheme: str
    accuracy: float  # held-out
    majority: float  # held-out accuracy of always answering the majority class
    samples: int
    seconds: float  # training time (0 when loaded from the cache)
    cached: bool

    def logit(self, problem: FusionProblem, group: Group, beta: float) -> float:
        x, ei, _ = group_tensors(problem, group, beta)
        with torch.no_grad():
            return float(self.net(x, ei, torch.zeros(len(x), dtype=torch.long), 1)[0])

    def predict_invalid(self, problem: FusionProblem, group: Group, beta: float) -> bool:
        return self.logit(problem, group, beta) > 0


def sample_groups(problem: FusionProblem, rng: np.random.Generator, count: int,
                  max_size: int = 40) -> list[tuple[Group, float]]:
    """``count`` (group, beta) pairs: components of random windows of the topological order; beta
    log-uniform in [32 KiB, 2 MiB] for half of them, within a factor 2 of the group's F_beta for the
    other half (so that both classes are well represented)."""
    out: list[tuple[Group, float]] = []
    n = problem.n
    while len(out) < count:
        length = int(rng.integers(1, min(max_size, n) + 1))
        start = int(rng.integers(0, n - length + 1))
        comps = problem.components(range(start, start + length))
        group = comps[int(rng.integers(len(comps)))]
        need = problem.buffer(group)
        if len(out) % 2 or not math.isfinite(need) or need <= 0:
            beta = float(2 ** rng.uniform(15, 21))
        else:  # near the group's own need: the examples that teach the boundary
            beta = float(need * 2 ** rng.uniform(-1, 1))
        out.append((group, beta))
    return out


def _batch(items: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    xs, eis, bs = [], [], []
    off = 0
    for i, (x, ei) in enumerate(items):
        xs.append(x)
        eis.append(ei + off)
        bs.append(torch.full((len(x),), i, dtype=torch.long))
        off += len(x)
    return torch.cat(xs), torch.cat(eis, dim=1), torch.cat(bs)


def cache_dir() -> Path:
    return Path(os.environ.get("MAGIS_CACHE", Path.home() / ".cache" / "magis")) / "fusion"


def _key(problems: list[FusionProblem], samples: int, epochs: int, seed: int) -> str:
    h = hashlib.sha256()
    h.update(f"v{MODEL_VERSION}:{problems[0].scheme}:{samples}:{epochs}:{seed}".encode())
    for p in problems:
        h.update(repr((p.names, p.preds, p.kh, p.kind, p.tensor_bytes, p.weight_bytes)).encode())
    return h.hexdigest()[:20]


def train_validity_model(problems: list[FusionProblem], samples: int = 6000, epochs: int = 40, seed: int = 0,
                         progress: Callable[[str], None] | None = None) -> ValidityModel:
    """Train the classifier on groups sampled from ``problems`` (one scheme)."""
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    data = []
    per = max(1, samples // len(problems))
    for p in problems:
        for group, beta in sample_groups(p, rng, per):
            x, ei, _ = group_tensors(p, group, beta)
            data.append((x, ei, float(not p.valid(group, beta))))
    order = rng.permutation(len(data))
    n_test = max(1, len(data) // 5)
    test = [data[i] for i in order[:n_test]]
    train = [data[i] for i in order[n_test:]]
    net = KGNN()
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    # the boundary F_beta = beta is a sharp threshold on a sum: a decaying rate settles onto it
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=epochs * -(-len(train) // 64))
    lossf = nn.BCEWithLogitsLoss()
    if progress:
        progress(f"training the validity classifier on {len(train)} groups ({problems[0].scheme})")
    for _ in range(epochs):
        perm = rng.permutation(len(train))
        for i in range(0, len(perm), 64):
            chunk = [train[j] for j in perm[i:i + 64]]
            x, ei, b = _batch([(c[0], c[1]) for c in chunk])
            y = torch.tensor([c[2] for c in chunk])
            opt.zero_grad()
            loss = lossf(net(x, ei, b, len(chunk)), y)
            loss.backward()
            opt.step()
            sched.step()
    net.eval()
    x, ei, b = _batch([(c[0], c[1]) for c in test])
    y = torch.tensor([c[2] for c in test])
    with torch.no_grad():
        pred = (net(x, ei, b, len(test)) > 0).float()
    acc = float((pred == y).float().mean())
    maj = float(max(y.mean(), 1 - y.mean()))
    return ValidityModel(net, problems[0].scheme, acc, maj, len(data), time.perf_counter() - t0, False)


def validity_model(problems: list[FusionProblem], samples: int = 6000, epochs: int = 40, seed: int = 0,
                   progress: Callable[[str], None] | None = None, use_cache: bool = True) -> ValidityModel:
    """The classifier for ``problems`` (same scheme): from the disk cache, else trained and cached."""
    with one_thread():
        path = cache_dir() / f"validity-{_key(problems, samples, epochs, seed)}.pt"
        if use_cache and path.exists():
            try:
                blob = torch.load(path, weights_only=True)
                net = KGNN()
                net.load_state_dict(blob["state"])
                net.eval()
                return ValidityModel(net, problems[0].scheme, blob["accuracy"], blob["majority"], blob["samples"],
                                     0.0, True)
            except (OSError, RuntimeError, KeyError, ValueError):
                pass  # a damaged cache entry: train again
        m = train_validity_model(problems, samples, epochs, seed, progress)
        if use_cache:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                torch.save({"state": m.net.state_dict(), "accuracy": m.accuracy, "majority": m.majority,
                            "samples": m.samples}, tmp)
                os.replace(tmp, path)
            except OSError:
                pass  # an unwritable cache only costs the next run its training
        return m


@contextmanager
def one_thread() -> Iterator[None]:
    """Small graphs: torch's intra-op threads only add overhead (several times slower on a busy CPU)."""
    n = torch.get_num_threads()
    if n != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if n != 1:
            torch.set_num_threads(n)


def _top_edges(scores: torch.Tensor, edges: list[Edge], k: int) -> list[Edge]:
    order = sorted(range(len(edges)), key=lambda i: (-float(scores[i]), edges[i]))
    return [edges[i] for i in order[:k]]


def gnn_explainer(model: ValidityModel, steps: int = 20, lr: float = 0.2, size_coef: float = 0.05,
                  ent_coef: float = 0.1) -> Explainer:
    """GNNExplainer (Ying et al. 2019): a sigmoid edge mask maximising the classifier's "invalid"
    probability on the masked group, with penalties on the mask's size and entropy."""

    def explain(problem: FusionProblem, group: Group, beta: float, k: int) -> list[Edge]:
        with one_thread():
            return _explain(problem, group, beta, k)

    def _explain(problem: FusionProblem, group: Group, beta: float, k: int) -> list[Edge]:
        x, ei, edges = group_tensors(problem, group, beta)
        if not edges:
            return []
        b = torch.zeros(len(x), dtype=torch.long)
        for p in model.net.parameters():
            p.requires_grad_(False)
        w = torch.full((len(edges),), 1.0, requires_grad=True)
        opt = torch.optim.Adam([w], lr=lr)
        for _ in range(steps):
            opt.zero_grad()
            m = torch.sigmoid(w)
            logit = model.net(x, ei, b, 1, m)[0]
            ent = -(m * torch.log(m + 1e-6) + (1 - m) * torch.log(1 - m + 1e-6)).mean()
            loss = nn.functional.softplus(-logit) + size_coef * m.sum() + ent_coef * ent
            loss.backward()
            opt.step()
        return _top_edges(torch.sigmoid(w).detach(), edges, k)

    return explain


def gradient_explainer(model: ValidityModel) -> Explainer:
    """Saliency: the gradient of the "invalid" logit with respect to the edge mask at 1."""

    def explain(problem: FusionProblem, group: Group, beta: float, k: int) -> list[Edge]:
        x, ei, edges = group_tensors(problem, group, beta)
        if not edges:
            return []
        m = torch.ones(len(edges), requires_grad=True)
        with one_thread():
            logit = model.net(x, ei, torch.zeros(len(x), dtype=torch.long), 1, m)[0]
        (grad,) = torch.autograd.grad(logit, m)
        return _top_edges(grad, edges, k)

    return explain
