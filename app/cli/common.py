"""What the ``magis`` commands share: exit statuses, the outcomes that fall short of what was asked
(``Outcome``), the optimizer's own failures (``InternalError``), the stage messages on stderr
(``Progress``), the one-line error messages, and the options and option helpers of several commands
(``--cost``, ``--plan``/``--point``/``--device``, comma-separated lists)."""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from core.fmt import terminal_safe

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_LIMIT_NOT_REACHED = 0, 1, 2, 3
EXIT_FITS_WITH_PLAN = 4  # ``magis fit``: eager's step does not fit the memory, a plan does
EXIT_INTERNAL = 70  # a bug of MAGIS Studio's own (sysexits' EX_SOFTWARE), never the user's input
EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 130, 141  # 128 + SIGINT, 128 + SIGPIPE, as a shell reports them


class Outcome(Exception):
    """The command did its work (printed its result, wrote its output) but the result falls short:
    ``main()`` prints ``magis: LABEL: message`` on stderr and exits with ``status``.  Not a
    ValueError: the input was fine."""

    status = EXIT_FAILED
    label = "failed"


class CheckFailed(Outcome):
    """``magis verify``: the exported script does not reproduce eager PyTorch (exit status 1)."""

    status = EXIT_FAILED
    label = "verification failed"


class LimitNotReached(Outcome):
    """``magis optimize``: the plan file is written, but no plan in it reaches the memory limit (exit
    status 3; a warning, not an error)."""

    status = EXIT_LIMIT_NOT_REACHED
    label = "warning"


class InternalError(Exception):
    """The optimizer failed on input that was accepted: a bug of ours, not bad input (exit status 70,
    where bad input is 2).  ``main()`` says so in one line; ``--verbose`` adds the traceback."""


@contextlib.contextmanager
def optimizer_errors(what: str) -> Iterator[None]:
    """Around work on input already validated (a loaded graph, a parsed limit): any exception from it
    but an interrupt is the optimizer's own failure, reported as ``InternalError``."""
    try:
        yield
    except (KeyboardInterrupt, BrokenPipeError, InternalError):
        raise
    except Exception as e:  # noqa: BLE001 -- whatever it is, the input was accepted
        raise InternalError(f"{what} failed on an accepted graph: {type(e).__name__}: {e}") from e


class Progress:
    """Stage messages on stderr, each with the seconds since the start (``[  12.3 s] ...``); while
    a stage runs longer than ``every`` seconds (tracing a multi-billion-parameter model takes a
    minute or more) it repeats that the stage is still running."""

    def __init__(self, every: float = 15.0, stream: Any = None) -> None:
        self.t0 = time.perf_counter()
        self.every = every
        self.stream = stream
        self._stage = ""
        self._since = self.t0
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _print(self, msg: str) -> None:
        print(f"[{time.perf_counter() - self.t0:7.1f} s] {msg}", file=self.stream or sys.stderr, flush=True)

    def __call__(self, msg: str) -> None:
        with self._lock:
            self._stage, self._since = msg, time.perf_counter()
            self._print(msg)

    def _beat(self) -> None:
        while not self._done.wait(self.every):
            with self._lock:
                if self._stage and time.perf_counter() - self._since >= self.every:
                    self._print(f"... still {self._stage[0].lower()}{self._stage[1:]}")


def _plan_graph(g, plan_file: Path, point: int | None):
    """The graph, the plan and the device profile of point ``point`` of a plan file made for ``g``
    (PlanError: one line)."""
    from core.search.plan import check_order, load_plans

    pf = load_plans(plan_file, g)
    plan = pf.point(point)
    h = plan.graph(g)
    check_order(h, plan.order)
    return h, plan, pf.device


def _cost_device(cost: str, device: str | None) -> str:
    """The device profile of ``--cost`` and ``--device`` (``core.cost.choice.cost_device``)."""
    from core.cost.choice import check_cost, cost_device

    try:
        check_cost(cost)
    except ValueError as e:
        raise ValueError(f"--cost: {e}") from None
    try:
        return cost_device(cost, device)
    except ValueError as e:
        raise ValueError(f"--device: {e}") from None


def _cost(a: argparse.Namespace, plan_device: str | None = None):
    """The analytic cost model of ``--device`` when given (it wins), else of the device the plan file
    was made for, else of the default device."""
    from core.cost import DEFAULT_PROFILE, AnalyticCost

    try:
        return AnalyticCost(a.device or plan_device or DEFAULT_PROFILE)
    except ValueError as e:
        hint = ("; --device names the cost model's device profile, not a torch device (the exported script "
                "takes --device cuda)" if str(a.device).partition(":")[0] in ("cuda", "mps") else "")
        raise ValueError(f"--device: {e}{hint}") from None


def _split(values: list[str] | None) -> list[str]:
    """Comma-separated lists, as one or more arguments: ``["a,b", "c"]`` -> ``["a", "b", "c"]``."""
    return [x.strip() for v in values or [] for x in v.split(",") if x.strip()]


def _names(names: Any) -> str:
    return ", ".join(sorted(names))


def _devices_help() -> str:
    """The help of a ``--device`` whose default is a device profile: the profiles' names."""
    from core.cost.devices import DEVICES

    return f"device profile for the latency estimate: {_names(DEVICES)} (default: %(default)s)"


def _schedules() -> str:
    """The names ``--schedule`` and ``--method`` take: the schedulers of the registry."""
    from core.schedule.registry import SCHEDULERS

    return _names(SCHEDULERS)


def _cost_option(s: argparse.ArgumentParser) -> None:
    """--cost of optimize and sweep: the cost model's name (``core.cost.choice.COST_MODELS``)."""
    from core.cost.choice import COST_MODELS, DEFAULT_COST

    s.add_argument("--cost", default=DEFAULT_COST, metavar="NAME",
                   help="latency model: " + "; ".join(f"{k}: {v}" for k, v in COST_MODELS.items())
                        + " (default: %(default)s; recorded in the plan file)")


def _plan_options(s: argparse.ArgumentParser, what: str) -> None:
    """--plan, --point and --device (which defaults to the plan file's device) of export and verify."""
    from core.cost.devices import DEFAULT_PROFILE, DEVICES

    s.add_argument("--plan", type=Path, default=None, metavar="PLAN", help=what)
    s.add_argument("--point", type=int, default=None, metavar="K", help="which point of the plan file (default: 0)")
    s.add_argument("--device", default=None, metavar="NAME",
                   help=f"device profile of the simulation that places the script's releases of swapped "
                        f"tensors and gives its simulated peak and latency: {_names(DEVICES)}. Default: the "
                        f"device the --plan file was made for, else {DEFAULT_PROFILE}; --device wins over the "
                        f"plan file's")


HINT = "; hint: "


def error_line(e: BaseException, limit: int = 400) -> str:
    """One terminal-safe line for an error a user caused (newlines and escapes written out), at
    most ``limit`` characters -- except its hint (after ``; hint: ``), which is never cut: a long
    message is shortened before the hint."""
    text = terminal_safe(" ".join(str(e).split("\n")))
    if len(text) <= limit:
        return text
    head, sep, hint = text.rpartition(HINT)
    if not sep:
        return text[: limit - 3] + "..."
    room = max(limit - len(sep) - len(hint), 60)
    return (head if len(head) <= room else head[: room - 3] + "...") + sep + hint


def error_detail(e: BaseException) -> str:
    """What ``--verbose`` adds to an error's one line: the traceback, and what torch logged while
    it happened (``ImportErrorMAGIS.detail``)."""
    import traceback

    parts = ["".join(traceback.format_exception(e))]
    detail = getattr(e, "detail", "")
    if detail:
        parts.append("torch logged:\n" + detail)
    return "\n".join(parts)
