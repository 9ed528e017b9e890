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
epochs of Adam under a one-cycle learning-rate schedule) takes two to three minutes on one CPU core,
so the repository ships the classifiers of the forward samples under both schemes (``make
classifier``: ``weights/``, half-precision, with their held-out accuracy in ``weights/manifest.json``).
A classifier is found by a key of the graphs, the scheme and the training setup (``training_setup``:
model version, features, network, settings): shipped, else in the disk cache (``$MAGIS_CACHE`` or
``~/.cache/magis``, ``fusion/``), else trained -- reporting each epoch with the time left -- and
cached, so a graph trains once.  A file whose recorded key or setup differs is refused and retrained.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import pickle
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
HIDDEN, LAYERS = 128, 4
WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"  # the shipped classifiers (``make classifier``)
log = logging.getLogger("magis.fusion")


class StaleWeights(ValueError):
    """A shipped or cached classifier of another training setup or graph: refused, retrained."""


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

    def __init__(self, n_in: int = N_FEATURES, hidden: int = HIDDEN, layers: int = LAYERS) -> None:
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
    source: str = "trained"  # "shipped" (the repository's weights), "cache" or "trained"
    heldout: int = 0  # held-out groups the accuracy is measured on

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


def training_setup(scheme: str, samples: int, epochs: int, seed: int) -> dict:
    """Everything the weights of a classifier depend on besides its graphs: the model version (bumped
    when the features, the network or the training change), the features, the network, the
    settings.  A shipped or cached file whose setup differs is refused."""
    return {"version": MODEL_VERSION, "scheme": scheme, "features": N_FEATURES, "op_classes": list(OP_CLASSES),
            "hidden": HIDDEN, "layers": LAYERS, "samples": samples, "epochs": epochs, "seed": seed}


def _key(problems: list[FusionProblem], samples: int, epochs: int, seed: int) -> str:
    h = hashlib.sha256()
    h.update(repr(sorted(training_setup(problems[0].scheme, samples, epochs, seed).items())).encode())
    for p in problems:
        h.update(repr((p.names, p.preds, p.kh, p.kind, p.tensor_bytes, p.weight_bytes)).encode())
    return h.hexdigest()[:20]


def shipped_path(key: str) -> Path:
    """Where the repository ships the weights of key ``key`` (``make classifier`` writes them)."""
    return WEIGHTS_DIR / f"validity-{key}.pt"


def dataset(problems: list[FusionProblem], samples: int, seed: int) -> tuple[list, list, np.random.Generator]:
    """(train, held-out, rng) examples ``(x, edge_index, invalid)`` of the problems: ``samples``
    groups labelled by F_beta, 20% held out; the rng continues into training (deterministic)."""
    rng = np.random.default_rng(seed)
    data = []
    per = max(1, samples // len(problems))
    for p in problems:
        for group, beta in sample_groups(p, rng, per):
            x, ei, _ = group_tensors(p, group, beta)
            data.append((x, ei, float(not p.valid(group, beta))))
    order = rng.permutation(len(data))
    n_test = max(1, len(data) // 5)
    return [data[i] for i in order[n_test:]], [data[i] for i in order[:n_test]], rng


def heldout_accuracy(net: KGNN, test: list) -> tuple[float, float]:
    """(accuracy, majority-class accuracy) of ``net`` on held-out examples."""
    x, ei, b = _batch([(c[0], c[1]) for c in test])
    y = torch.tensor([c[2] for c in test])
    with torch.no_grad():
        pred = (net(x, ei, b, len(test)) > 0).float()
    return float((pred == y).float().mean()), float(max(y.mean(), 1 - y.mean()))


def _left(seconds: float) -> str:
    return f"about {seconds:.0f} s left" if seconds < 90 else f"about {seconds / 60:.1f} min left"


def train_validity_model(problems: list[FusionProblem], samples: int = 6000, epochs: int = 40, seed: int = 0,
                         progress: Callable[[str], None] | None = None) -> ValidityModel:
    """Train the classifier on groups sampled from ``problems`` (one scheme).  ``progress`` hears
    each epoch with an estimate of the time left (the mean epoch so far times the epochs to go)."""
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    scheme = problems[0].scheme
    if progress:
        progress(f"training the validity classifier ({scheme}): sampling {samples:,} groups, then {epochs} epochs")
    train, test, rng = dataset(problems, samples, seed)
    net = KGNN()
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    # the boundary F_beta = beta is a sharp threshold on a sum: a decaying rate settles onto it
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=epochs * -(-len(train) // 64))
    lossf = nn.BCEWithLogitsLoss()
    if progress:
        progress(f"training the validity classifier on {len(train)} groups ({scheme}): epoch 0/{epochs}")
    t1 = time.perf_counter()
    for epoch in range(epochs):
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
        if progress:
            per_epoch = (time.perf_counter() - t1) / (epoch + 1)
            progress(f"training the validity classifier on {len(train)} groups ({scheme}): epoch "
                     f"{epoch + 1}/{epochs}, {_left(per_epoch * (epochs - epoch - 1))}")
    net.eval()
    acc, maj = heldout_accuracy(net, test)
    return ValidityModel(net, scheme, acc, maj, len(train) + len(test), time.perf_counter() - t0, False,
                         "trained", len(test))


def _blob(m: ValidityModel, key: str, setup: dict, half: bool = False) -> dict:
    state = {k: (v.half() if half and v.is_floating_point() else v) for k, v in m.net.state_dict().items()}
    return {"key": key, "setup": setup, "state": state, "accuracy": m.accuracy, "majority": m.majority,
            "samples": m.samples, "heldout": m.heldout}


def load_weights(path: Path, key: str, setup: dict, source: str) -> ValidityModel:
    """The classifier saved at ``path``; ``StaleWeights`` if it was made for another key (graphs,
    settings) or training setup, ``OSError`` / ``RuntimeError`` ... if the file is damaged."""
    blob = torch.load(path, weights_only=True)
    if blob.get("key") != key or blob.get("setup") != setup:
        raise StaleWeights(f"{path.name} was built for another training setup or graph "
                           f"(its setup {blob.get('setup')}, wanted {setup})")
    net = KGNN(setup["features"], setup["hidden"], setup["layers"])
    net.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in blob["state"].items()})
    net.eval()
    return ValidityModel(net, setup["scheme"], blob["accuracy"], blob["majority"], blob["samples"], 0.0, True,
                         source, blob.get("heldout", 0))


def validity_model(problems: list[FusionProblem], samples: int = 6000, epochs: int = 40, seed: int = 0,
                   progress: Callable[[str], None] | None = None, use_cache: bool = True) -> ValidityModel:
    """The classifier for ``problems`` (same scheme): the weights the repository ships for them
    (``make classifier``), else from the disk cache, else trained (with progress and an estimate of
    the time left) and cached.  A shipped or cached file of another training setup is refused."""
    key = _key(problems, samples, epochs, seed)
    setup = training_setup(problems[0].scheme, samples, epochs, seed)
    with one_thread():
        path = cache_dir() / f"validity-{key}.pt"
        for where, source in ((shipped_path(key), "shipped"), (path, "cache")):
            if source == "cache" and not use_cache or not where.exists():
                continue
            try:
                return load_weights(where, key, setup, source)
            except StaleWeights as e:
                log.warning("retraining the validity classifier: %s", e)
            except (OSError, RuntimeError, KeyError, ValueError, TypeError, pickle.UnpicklingError) as e:
                log.warning("retraining the validity classifier: %s is damaged (%s)", where, e)
        m = train_validity_model(problems, samples, epochs, seed, progress)
        if use_cache:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                torch.save(_blob(m, key, setup), tmp)
                os.replace(tmp, path)
            except OSError:
                pass  # an unwritable cache only costs the next run its training
        return m


def build_shipped(problems: list[FusionProblem], out_dir: Path | None = None, samples: int = 6000, epochs: int = 40,
                  seed: int = 0, progress: Callable[[str], None] | None = None) -> tuple[Path, ValidityModel]:
    """Train the classifier of ``problems`` and write it where ``validity_model`` finds it shipped:
    half-precision weights (half the size), its held-out accuracy measured on the saved weights."""
    key = _key(problems, samples, epochs, seed)
    setup = training_setup(problems[0].scheme, samples, epochs, seed)
    with one_thread():
        m = train_validity_model(problems, samples, epochs, seed, progress)
        blob = _blob(m, key, setup, half=True)
        net = KGNN(N_FEATURES, HIDDEN, LAYERS)
        net.load_state_dict({k: v.float() for k, v in blob["state"].items()})
        net.eval()
        _train, test, _rng = dataset(problems, samples, seed)
        blob["accuracy"], blob["majority"] = heldout_accuracy(net, test)  # of the weights as shipped
    path = (out_dir or WEIGHTS_DIR) / f"validity-{key}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(blob, tmp)
    os.replace(tmp, path)
    return path, load_weights(path, key, setup, "shipped")


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


MANIFEST = "manifest.json"


def main(argv: list[str] | None = None) -> int:
    """``python -m core.search.fusion.gnn GRAPH_FILE... [--scheme lbdf brr]``: train and ship the
    classifier of each forward graph file under each scheme (``make classifier``), and list them with
    their held-out accuracy in ``weights/manifest.json``."""
    import argparse
    import json

    from ...ir import io
    from .problem import FusionProblem

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("graphs", nargs="+", help="forward graph files (magis import / sample_graphs/graphs)")
    ap.add_argument("--scheme", nargs="+", default=["lbdf", "brr"])
    ap.add_argument("--out", default=str(WEIGHTS_DIR))
    a = ap.parse_args(argv)
    out = Path(a.out)
    try:
        entries = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        entries = []
    for file in a.graphs:
        g = io.load(file)
        for scheme in a.scheme:
            t0 = time.perf_counter()
            path, m = build_shipped([FusionProblem(g, scheme)], out,
                                    progress=lambda msg: print(f"  {msg}", end="\r", flush=True))
            for e in [e for e in entries if (e["graph"], e["scheme"]) == (g.name, scheme)]:
                entries.remove(e)  # rebuilt: its older weights go unless they are these
                if e["weights"] != path.name:
                    (out / e["weights"]).unlink(missing_ok=True)
            entries.append({"weights": path.name, "graph": g.name, "graph_file": Path(file).name, "scheme": scheme,
                            "accuracy": m.accuracy, "majority": m.majority, "heldout": m.heldout,
                            "samples": m.samples, "bytes": path.stat().st_size})
            print(f"{g.name} {scheme}: held-out accuracy {m.accuracy:.4f} (majority {m.majority:.4f}) "
                  f"in {time.perf_counter() - t0:.0f} s -> {path}")
    entries.sort(key=lambda e: (e["graph"], e["scheme"]))
    from ...ir.io import atomic_write

    atomic_write(out / MANIFEST, (json.dumps(entries, indent=1) + "\n").encode())
    (out / MANIFEST).chmod(0o644)  # a shipped file, readable like the weights
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
