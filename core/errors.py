"""Exceptions that carry a meaning for the searches.

``RuleNotApplicable`` is the one way a rule says "not here": a search counts it as a refused
application and goes on.  Any other exception raised while a search matches, applies or evaluates a
rule is a bug and propagates (``tests/test_registries.py`` registers a faulty rule and sees the
search fail).  It is a ``ValueError`` so that a user's hand-written application (``magis
transform``) that does not apply is a one-line error like any other bad input.
"""

from __future__ import annotations


class RuleNotApplicable(ValueError):
    """A rule application that does not apply to the graph (the message says why)."""


class SplitError(RuleNotApplicable):
    """An F-Trans that breaks one of the constraints of a valid split (the message says which;
    ``analysis.dgraph.plan_split`` and the routing check of ``analysis.routing``)."""


__all__ = ["RuleNotApplicable", "SplitError"]
