"""Fixtures shared by the test files.

Browser tests (``pytest.mark.browser``): ``server`` serves the app from a thread, one per test module,
on the sample named by the module's ``APP_SAMPLE`` (default ``bert_tiny``), after the module's
``app_setup(app)`` if it has one; ``browser`` is headless Chromium (one per module); ``page`` a fresh
page on the server, returned once the module's ``page_ready(page)`` (default: summary, memory curve
and laid-out graph shown) holds.  Their building blocks and the page helpers are in
``tests/browser_helpers.py``.  A test that asks for ``browser`` or ``page`` is marked ``browser`` here
too, so ``-m "not browser"`` (``make test-fast``) never starts Chromium.
"""

from __future__ import annotations

import os

import pytest

from tests.browser_helpers import chromium, opened, serving

CHROMIUM_FIXTURES = {"browser", "page"}


def pytest_configure(config) -> None:
    """The test process's environment, as ``magis``'s ``main`` sets it: the samples are built from
    configs, and nothing waits on the network."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    # the grid peers run their grids only, unless a test asks for the refinement (``refine=True``):
    # refined, each spends the budget it is given, seconds per call on a tiny graph
    from core.search.peers import base

    base.REFINE_BY_DEFAULT = False


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects by marker
def pytest_collection_modifyitems(items) -> None:
    for item in items:
        if CHROMIUM_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="module")
def server(request):
    """(url, app): the app on the module's ``APP_SAMPLE``, served from a thread on a free port."""
    sample = getattr(request.module, "APP_SAMPLE", "bert_tiny")
    with serving(sample, setup=getattr(request.module, "app_setup", None)) as s:
        yield s


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


@pytest.fixture
def page(request, browser, server):
    """A fresh page (its own browser context) on the module's server; ``page.js_errors`` collects the
    page's JavaScript errors."""
    with opened(browser, server[0], ready=getattr(request.module, "page_ready", None),
                **getattr(request.module, "PAGE_CONTEXT", {})) as pg:
        yield pg
