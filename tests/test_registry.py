"""``core.registry.Registry``, checked by hand on a small registry of strings, and every registry of
the product is one (rules, methods, metrics, schedulers, substitution searches, fusion searches,
explainers)."""

from __future__ import annotations

import pytest

from core.registry import Registry, UnknownName


def fruit() -> Registry[str]:
    r: Registry[str] = Registry("fruit")
    for name in ("pear", "apple", "fig"):
        assert r.register(name, name.upper()) == name.upper()  # register returns the item
    return r


def test_names_items_and_iteration_are_in_registration_order():
    r = fruit()
    assert r.names() == list(r) == ["pear", "apple", "fig"]
    assert r.items() == [("pear", "PEAR"), ("apple", "APPLE"), ("fig", "FIG")]
    assert r.values() == ["PEAR", "APPLE", "FIG"]
    assert len(r) == 3 and "apple" in r and "kiwi" not in r and 3 not in r
    assert r.get("fig") == r["fig"] == "FIG"


def test_a_duplicate_name_is_refused_unless_replace_and_a_replacement_keeps_its_place():
    r = fruit()
    with pytest.raises(ValueError, match="'apple' is taken"):
        r.register("apple", "GREEN APPLE")
    assert r["apple"] == "APPLE"
    with pytest.raises(ValueError, match="needs a name"):
        r.register("", "NOTHING")
    assert r.register("apple", "GREEN APPLE", replace=True) == "GREEN APPLE"
    assert r.items() == [("pear", "PEAR"), ("apple", "GREEN APPLE"), ("fig", "FIG")]


def test_an_unknown_name_is_a_value_error_listing_the_known_names():
    r = fruit()
    with pytest.raises(ValueError) as e:
        r.get("kiwi")
    assert str(e.value) == "unknown fruit 'kiwi'; known: pear, apple, fig"
    with pytest.raises(KeyError):  # ``r[name]`` keeps the mapping contract too
        r["kiwi"]
    assert isinstance(e.value, UnknownName)
    s: Registry[str] = Registry("fruit", sort_known=True)
    s.register("pear", "PEAR")
    s.register("apple", "APPLE")
    with pytest.raises(ValueError, match=r"^unknown fruit 'kiwi'; known: apple, pear$"):
        s.get("kiwi")
    assert s.names() == ["pear", "apple"]  # sorted in the message only


def test_a_check_vets_what_is_registered():
    def no_lowercase(name: str, item: str) -> None:
        if item != item.upper():
            raise ValueError(f"{name}: upper case only")

    r: Registry[str] = Registry("fruit", check=no_lowercase)
    with pytest.raises(ValueError, match="upper case only"):
        r.register("pear", "pear")
    with pytest.raises(ValueError, match="upper case only"), r.temporarily("pear", "pear"):
        pass
    assert "pear" not in r


def test_temporarily_restores_what_was_there_on_exit():
    r = fruit()
    with r.temporarily("kiwi", "KIWI") as item:  # a new name: there for the block, gone after
        assert item == "KIWI" and r.names() == ["pear", "apple", "fig", "kiwi"]
    assert r.names() == ["pear", "apple", "fig"] and "kiwi" not in r
    with r.temporarily("apple", "RED APPLE"):  # a taken name: replaced for the block, back after
        assert r["apple"] == "RED APPLE"
    assert r.items() == [("pear", "PEAR"), ("apple", "APPLE"), ("fig", "FIG")]


def test_temporarily_restores_what_was_there_on_an_exception():
    r = fruit()
    with pytest.raises(RuntimeError, match="boom"), r.temporarily("kiwi", "KIWI"), r.temporarily("fig", "DRY FIG"):
        assert r["fig"] == "DRY FIG" and "kiwi" in r
        raise RuntimeError("boom")
    assert r.items() == [("pear", "PEAR"), ("apple", "APPLE"), ("fig", "FIG")]


def test_unregister_removes_a_name_and_says_what_it_held():
    r = fruit()
    assert r.unregister("apple") == "APPLE" and r.names() == ["pear", "fig"]
    assert r.unregister("apple") is None


def test_every_product_registry_is_a_registry_and_not_empty():
    from core.metrics import METRICS
    from core.schedule.registry import SCHEDULERS
    from core.search.fusion.explain import EXPLAINERS
    from core.search.fusion.search import SEARCHES as FUSION_SEARCHES
    from core.search.methods import METHODS
    from core.search.ocggs import SEARCHES as SUBSTITUTION_SEARCHES
    from core.search.ocggs import SubstSearch
    from core.transform.registry import RULES

    registries = {"rules": RULES, "methods": METHODS, "metrics": METRICS, "schedulers": SCHEDULERS,
                  "substitution searches": SUBSTITUTION_SEARCHES, "fusion searches": FUSION_SEARCHES,
                  "explainers": EXPLAINERS}
    for what, r in registries.items():
        assert isinstance(r, Registry) and len(r) > 0, what
    assert all(isinstance(s, SubstSearch) for s in SUBSTITUTION_SEARCHES.values())
    # the public functions over them keep their messages
    from core.schedule import get_scheduler
    from core.search.fusion.explain import make_explainer
    from core.search.methods import get_method
    from core.transform.registry import get_rule

    with pytest.raises(ValueError, match=r"unknown schedule 'nope'; known: brute, hmcos, incremental"):
        get_scheduler("nope")
    with pytest.raises(ValueError, match=r"unknown method 'nope'; known: magis, eager, "):
        get_method("nope")
    with pytest.raises(ValueError, match=r"unknown rule 'nope'; known: "):
        get_rule("nope")
    with pytest.raises(ValueError, match=r"^unknown explainer 'shap'; known: gnn, grad, oracle, random$"):
        make_explainer("shap")
