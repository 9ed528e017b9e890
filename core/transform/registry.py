"""Every rule by name (``RULES``): the F-Tree, rematerialization and swapping families.  The list is
explicit, like the scheduler registry; ``get_rule`` builds nothing, rules are stateless objects."""

from __future__ import annotations

from .fission import Fission
from .ftree_rules import Disable, Lift, Mutate
from .remat import DeRemat, Remat, RematChain
from .rule import Rule
from .swap import DeSwap, Swap, SwapLate

RULES: dict[str, Rule] = {r.name: r for r in (Fission(), Lift(), Disable(), Mutate(), Remat(), RematChain(),
                                               DeRemat(), Swap(), SwapLate(), DeSwap())}

# the rules whose children keep the schedule free of copies, evaluated exactly as deltas
REMAT_RULES: dict[str, Rule] = {k: RULES[k] for k in ("remat", "remat_chain", "deremat")}


def get_rule(name: str) -> Rule:
    """The rule called ``name`` (ValueError for an unknown name)."""
    if name not in RULES:
        raise ValueError(f"unknown rule {name!r}; known: {', '.join(sorted(RULES))}")
    return RULES[name]


__all__ = ["RULES", "REMAT_RULES", "get_rule"]
