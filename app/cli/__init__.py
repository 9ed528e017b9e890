"""``magis`` command line.

    magis import SPEC -o FILE [--forward] [--sgd LR | --adam LR]   capture a sample or path/to/file.py:factory
    magis info FILE [--device NAME] [--json]           nodes, weights, baseline peak, latency, hot-spots
    magis schedule FILE --method NAME [--json]         peak bytes of a scheduler's order and its run time
    magis export FILE [--schedule NAME] -o script.py   runnable PyTorch script of a graph + schedule
    magis transform FILE --remat T:U --swap T:U -o OUT apply rules by hand, write the new graph
    magis verify SPEC [--schedule NAME] [--graph FILE] eager PyTorch vs exported script: errors and peaks
    magis sweep W1,W2 --memory-limits 0.8,8GiB -o DIR  optimize workloads x limits x devices in parallel
    magis compare FILE [--methods M,...] -o PLAN       every method on one graph: one plan file, one table
    magis fit SPEC --device NAME [--memory SIZE]       does the training step fit the card? eager, then plans
    magis fuse FILE --buffer 256KiB -o PLAN            layer fusion under an on-chip buffer (GET)
    magis app [FILE] [--sample NAME] [--port N]        the web app (127.0.0.1 by default)

Errors a user can cause print as one line on stderr (exit status 2), never a traceback.  Exit
statuses: 0 done; 1 ``verify``'s comparison failed, or nothing ``fit`` tried fits; 2 bad input or usage;
3 ``optimize`` wrote its plan but no plan reaches the memory limit; 4 the step ``fit`` judged fits only
with a plan (eagerly it does not); 130 interrupted; 141 stdout closed early (``magis info F | head``).

The command line is an entry point of the product, like the web app: it wires core to the samples
and to user files (``app.specs`` resolves what the user names), so it lives here and not in core.
``python -m app.cli`` runs it without the installed ``magis`` script.

One module per command (``import_cmd``, ``info``, ``schedule``, ``export``, ``optimize``, ``sweep``,
``compare``, ``fit``, ``ftree``, ``transform``, ``verify``, ``substitute``, ``fuse``; ``serve`` for
``magis app``), each with ``add_parser(sub)`` for its sub-command and its ``cmd_*`` function;
``common`` holds what several share.  This package assembles the parser and runs a command (``main``).
"""

from __future__ import annotations

import argparse
import os
import sys

from core.ir.graph import GraphError

from . import (
    compare,
    export,
    fit,
    ftree,
    fuse,
    import_cmd,
    info,
    optimize,
    schedule,
    serve,
    substitute,
    sweep,
    transform,
    verify,
)
from .common import (
    EXIT_BAD_INPUT,
    EXIT_BROKEN_PIPE,
    EXIT_FAILED,
    EXIT_FITS_WITH_PLAN,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_LIMIT_NOT_REACHED,
    EXIT_OK,
    HINT,
    CheckFailed,
    InternalError,
    LimitNotReached,
    Outcome,
    Progress,
    error_detail,
    error_line,
    optimizer_errors,
)

__all__ = [
    "EXIT_BAD_INPUT", "EXIT_BROKEN_PIPE", "EXIT_FAILED", "EXIT_FITS_WITH_PLAN", "EXIT_INTERNAL", "EXIT_INTERRUPTED",
    "EXIT_LIMIT_NOT_REACHED", "EXIT_OK", "HINT", "COMMANDS", "CheckFailed", "InternalError", "LimitNotReached",
    "Outcome", "Progress", "build_parser", "error_detail", "error_line", "main", "optimizer_errors",
]

# the sub-commands in the order ``magis --help`` lists them
COMMANDS = (import_cmd, info, schedule, export, optimize, sweep, compare, fit, ftree, transform, verify, substitute,
            fuse, serve)


def build_parser() -> argparse.ArgumentParser:
    """The ``magis`` argument parser; each command module adds its sub-command (``add_parser``), which
    sets ``fn`` to its ``cmd_*`` function.  The valid names of ``--device``, ``--method`` and
    ``--schedule`` come from their registries."""
    p = argparse.ArgumentParser(prog="magis", description="MAGIS Studio: memory optimizer for PyTorch graphs")
    p.add_argument("--verbose", action="store_true",
                   help="on an error, also print its traceback and what torch logged (before or after COMMAND)")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run ``magis`` with ``argv`` (default: the process arguments); the exit status."""
    for stream in (sys.stdout, sys.stderr):  # whatever the terminal's encoding: never a codec error
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # samples are built from configs, never downloaded
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = "--verbose" in argv  # accepted before or after the command
    args = build_parser().parse_args([x for x in argv if x != "--verbose"])
    try:
        args.fn(args)
    except Outcome as e:  # done, but short of what was asked
        print(f"magis: {e.label}: {error_line(e)}", file=sys.stderr)
        return e.status
    except BrokenPipeError:  # stdout's reader left (`magis info F | head`): stop quietly
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except InternalError as e:
        if verbose:
            print(error_detail(e.__cause__ or e), file=sys.stderr)
        print(f"magis: internal error: {error_line(e)} -- a bug of MAGIS Studio, not of your input; "
              f"rerun with --verbose for the traceback", file=sys.stderr)
        return EXIT_INTERNAL
    except (GraphError, ValueError, OSError) as e:  # a missing, unreadable or unwritable path too
        if verbose:
            print(error_detail(e), file=sys.stderr)
        print(f"magis: error: {error_line(e)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("magis: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    try:
        sys.stdout.flush()  # a reader that left shows here when the output fit in the buffer
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    return EXIT_OK


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush of what is still buffered does not
    fail again (the Python documentation's recipe for SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file descriptor (a captured stream)
        pass
