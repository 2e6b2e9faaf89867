"""Fixtures of the browser tests (helpers in testkit/served.py)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit import tiers
from testkit.held_endpoint import HeldEndpoint
from testkit.served import (
    CHROMIUM,
    CHROMIUM_ARGS,
    INLINE_WORKERS,
    Served,
    make_key,
    offline_context,
    serve,
    stop,
)


@pytest.fixture(scope="module")
def module_gate() -> Iterator[HeldEndpoint]:
    """The held endpoint of the module's server (testkit/held_endpoint.py): it holds the audits a test needs RUNNING."""
    with HeldEndpoint() as gate:
        yield gate


@pytest.fixture
def gate(module_gate: HeldEndpoint, served: Served) -> Iterator[HeldEndpoint]:
    """The module's gate, holding from the test's first call; opened at the end, so no audit stays held."""
    module_gate.rearm()
    try:
        yield module_gate
    finally:
        module_gate.release()


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, data_dir: Path, module_gate: HeldEndpoint
) -> Iterator[Served]:
    state = tmp_path_factory.mktemp("dashboard")
    proc, url, _ = serve(
        state,
        auth=True,
        extra_env={
            "ICLAUDIT_DATA_DIR": str(data_dir),
            "ICLAUDIT_INLINE_WORKERS": str(INLINE_WORKERS),
            **module_gate.allowlist_env(),
        },
    )
    try:
        yield Served(url, make_key(state, "alice"), make_key(state, "bob"), state / "serve.log")
    finally:
        stop(proc)


@pytest.fixture(scope="session")
def browser():
    tiers.refuse("Chromium")
    if not shutil.which(CHROMIUM) and not Path(CHROMIUM).is_file():
        pytest.fail(f"Chromium not found at {CHROMIUM}; `.ci/run` installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, served: Served):
    context = offline_context(browser, served.url)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    # The Content-Security-Policy (app/api/headers.py) holds: nothing the pages load or run is refused.
    page.on("console", lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None)
    page.errors = errors  # type: ignore[attr-defined]
    yield page
    context.close()
    assert errors == [], errors
