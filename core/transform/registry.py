"""Every rule by name (``RULES``): the F-Tree, rematerialization, swapping and substitution families.

The one list of rules.  A rule describes itself (``Rule.family``, ``text``, ``option``), and every
table of rules is read from here when it is needed: the search's rule sets (``rules_of``), the
app's graph marks and rule steps, ``magis transform``'s options, plan-file validation.  Adding a
rule is its file plus one ``register_rule`` line.  Rules are stateless objects; ``get_rule`` builds
nothing.
"""

from __future__ import annotations

from ..registry import Registry
from .fission import Fission
from .ftree_rules import Disable, Lift, Mutate
from .microbatch import MicroBatchFission
from .remat import DeRemat, Remat, RematChain
from .rule import Rule
from .substitution import SUBSTITUTE_RULES
from .swap import DeSwap, Reissue, Swap, SwapLate, SwapOutput


def _check_rule(name: str, rule: Rule) -> None:
    if name != rule.name:
        raise ValueError(f"rule {rule.name!r} registered as {name!r}: a rule goes by its own name")
    if not rule.family or not rule.text:
        raise ValueError(f"rule {rule.name!r} needs a family and a text")


RULES: Registry[Rule] = Registry("rule", sort_known=True, check=_check_rule)


def register_rule(rule: Rule) -> Rule:
    """Add ``rule`` to the registry (ValueError if its name is taken or it says nothing of itself)."""
    return RULES.register(rule.name, rule)


def unregister_rule(name: str) -> None:
    RULES.unregister(name)


for _rule in (Fission(), MicroBatchFission(), Lift(), Disable(), Mutate(), Remat(), RematChain(), DeRemat(), Swap(), SwapLate(),
              SwapOutput(), DeSwap(), Reissue(), *SUBSTITUTE_RULES):
    register_rule(_rule)


def get_rule(name: str) -> Rule:
    """The rule called ``name`` (ValueError for an unknown name)."""
    return RULES.get(name)


def rules_of(*families: str) -> dict[str, Rule]:
    """The rules of ``families``, in registry order."""
    return {k: r for k, r in RULES.items() if r.family in families}


def families() -> list[str]:
    """The rule families, in registry order."""
    return list(dict.fromkeys(r.family for r in RULES.values()))


# the family whose children keep the schedule free of copies, evaluated exactly as deltas
REMAT_FAMILY = "remat"
# the families matched on the memory hot-spots (tensor rules) and the F-Tree's
TENSOR_FAMILIES = ("remat", "swap")
FTREE_FAMILY = "fission"
SUBSTITUTION_FAMILY = "substitution"  # TASO's rules (``transform.substitution``)

__all__ = ["FTREE_FAMILY", "REMAT_FAMILY", "SUBSTITUTION_FAMILY", "RULES", "TENSOR_FAMILIES", "families", "get_rule", "register_rule",
           "rules_of", "unregister_rule"]
