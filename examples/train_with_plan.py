"""Train a small model with a MAGIS plan inside an ordinary PyTorch loop, and check it against eager.

    PYTHONPATH=. python examples/train_with_plan.py [--steps 300] [--limit 0.5] [--time-budget 10]

The model (an MLP with batch norm) is trained twice from the same seed on the same batches: once
with ``loss = step(x, y)`` -- the training step run by a plan found under a memory limit of half
the step's peak -- and once eagerly (``loss_fn(model, x, y).backward()``).  Both use the same Adam
optimizer.  It prints the two loss curves' largest difference, the final parameters' and batch-norm
statistics' largest difference, the plan's simulated peak and the peak measured on every planned
step (live bytes of tensor storages, the simulator's way of counting), and asserts that the losses
agree (rtol 1e-4) and that no measured peak is above the simulated one.

The plan is cached (``$MAGIS_CACHE/plans``, default ``~/.cache/magis/plans``): a second run does
not search.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time

import torch
from torch import nn

from core.codegen.runtime import LiveBytesTracker
from core.fmt import format_bytes
from core.train import plan_step


def make_model(width: int = 64, depth: int = 4, d_in: int = 64, classes: int = 10) -> nn.Module:
    layers: list[nn.Module] = []
    for k in range(depth):
        layers += [nn.Linear(d_in if k == 0 else width, width), nn.BatchNorm1d(width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, classes))


def loss_fn(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(model(x), y)


def batches(steps: int, batch: int, d_in: int = 64, classes: int = 10, seed: int = 1):
    """A fixed synthetic task: labels from a random linear teacher on Gaussian inputs."""
    gen = torch.Generator().manual_seed(seed)
    teacher = torch.randn(d_in, classes, generator=gen)
    for _ in range(steps):
        x = torch.randn(batch, d_in, generator=gen)
        yield x, (x @ teacher).argmax(1)


def eager_peak(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> int:
    """Live bytes of one eager step (forward, loss, backward), counted like the plan's."""
    model = copy.deepcopy(model)
    roots = [*model.parameters(), *model.buffers(), x, y]
    with LiveBytesTracker("cpu", roots) as t:
        loss_fn(model, x, y).backward()
    return t.peak_bytes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--limit", default="0.5", help="memory limit: a fraction of the peak or a size (8GiB)")
    p.add_argument("--time-budget", type=float, default=10.0, help="seconds of search (first run only)")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--measure-every", type=int, default=10, help="measure the live bytes of every N-th step")
    a = p.parse_args(argv)

    torch.manual_seed(0)
    model = make_model()
    reference = copy.deepcopy(model)  # the eager run starts from the same weights
    x0, y0 = next(batches(1, a.batch))

    # ---- the lines a user writes ---------------------------------------------------------------
    t0 = time.perf_counter()
    step = plan_step(model, loss_fn, (x0, y0), memory_limit=a.limit, time_budget=a.time_budget,
                     name="mlp_bn")
    planned = time.perf_counter() - t0
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    losses, measured = [], []
    t0 = time.perf_counter()
    for k, (x, y) in enumerate(batches(a.steps, a.batch)):
        opt.zero_grad()
        if k % a.measure_every:
            loss = step(x, y)  # forward and backward by the plan; .grad set, batch-norm stats updated
        else:
            loss, mem = step.measure(x, y)  # the same, with its live bytes measured
            measured.append(mem["measured_peak_bytes"])
        opt.step()
        losses.append(loss.item())
    planned_run = time.perf_counter() - t0
    # ---------------------------------------------------------------------------------------------

    opt_ref = torch.optim.Adam(reference.parameters(), lr=a.lr)
    ref_losses = []
    t0 = time.perf_counter()
    for x, y in batches(a.steps, a.batch):
        opt_ref.zero_grad()
        loss = loss_fn(reference, x, y)
        loss.backward()
        opt_ref.step()
        ref_losses.append(loss.item())
    eager_run = time.perf_counter() - t0

    diff = max(abs(u - v) for u, v in zip(losses, ref_losses, strict=True))
    state_diff = max(float((u.double() - v.double()).abs().max())
                     for u, v in zip(model.state_dict().values(), reference.state_dict().values(), strict=True))
    c = step.first
    print(f"plan: {step.summary()}")
    print(f"  {len(c.plan.applications)} rule applications: "
          + ", ".join(f"{r} x{n}" for r, n in sorted(_count(a.rule for a in c.plan.applications).items())))
    print(f"  planned in {planned:.1f} s ({'plan cache hit' if step.from_cache else f'{step.searches} search'})")
    print(f"steps: {a.steps} (batch {a.batch}, Adam lr {a.lr}); plan {planned_run:.1f} s "
          f"(every {a.measure_every}th step measured), "
          f"eager {eager_run:.1f} s")
    print(f"loss: first {losses[0]:.4f}, last {losses[-1]:.4f} (eager {ref_losses[-1]:.4f}); "
          f"max |plan - eager| over the curve {diff:.3g}")
    print(f"parameters and buffers after training: max |plan - eager| {state_diff:.3g}")
    print(f"peak: simulated {format_bytes(c.simulated_peak)} ({c.simulated_peak} B) under the limit "
          f"{a.limit} = {format_bytes(c.limit_bytes)}; measured max over {len(measured)} steps "
          f"{format_bytes(max(measured))} ({max(measured)} B); eager's simulated peak "
          f"{format_bytes(c.eager_peak)}, eager measured {format_bytes(eager_peak(reference, x0, y0))}")
    ok = all(abs(u - v) <= 1e-4 * abs(v) + 1e-6 for u, v in zip(losses, ref_losses, strict=True))
    assert ok, f"the plan's loss curve differs from eager's (max difference {diff})"
    assert max(measured) <= c.simulated_peak, "a measured peak is above the simulated one"
    assert c.reached, "the plan does not reach the memory limit"
    print("ok: the loss curve equals eager's and every measured peak is within the plan's simulated peak")
    return 0


def _count(items) -> dict[str, int]:
    out: dict[str, int] = {}
    for k in items:
        out[k] = out.get(k, 0) + 1
    return out


if __name__ == "__main__":
    sys.exit(main())
