"""Fixtures of the console's end-to-end tests: one real platform per module (embedded mode:
`python -m backend serve` with SQLite and an in-process broker), Debian's chromium driven
by Playwright, and a page per test that collects the browser's console errors."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Error, Page, Playwright, sync_playwright

from backend.api import ui
from tests.backend.live_platform import Platform, StackPlatform, platform

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
DIST = ui.DIST / "index.html"
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
# The browser logs every 4xx response it gets as a console error; those are expected
# (validation failures are 422s), anything else is not.
EXPECTED_4XX = re.compile(r"Failed to load resource: the server responded with a status of 4\d\d")


@pytest.fixture(scope="session")
def playwright_instance() -> Iterator[Playwright]:
    with sync_playwright() as pw:
        yield pw


@pytest.fixture(scope="session")
def chromium(playwright_instance: Playwright) -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no browser at {CHROMIUM}: run scripts/browser.sh")
    browser = playwright_instance.chromium.launch(
        executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS
    )
    try:
        yield browser
    finally:
        browser.close()


@pytest.fixture(scope="module", params=["embedded", "deployed"])
def plat(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Platform]:
    """The whole platform, started once for the module: embedded (`python -m backend
    serve`: SQLite, an in-process broker), or deployed (`local_servers.stack`: the services
    of docker-compose.yml as processes of this machine, the console behind nginx)."""
    if not DIST.exists():
        pytest.fail(f"the console is not built ({DIST} is missing): run make ui")
    if request.param == "embedded":
        yield from platform(tmp_path_factory.mktemp("e2e"), None, None)
        return
    p = StackPlatform(tmp_path_factory.mktemp("stack"))
    try:
        yield p.start()
    finally:
        p.stop()


@dataclass
class UI:
    """A browser page on the console and what its console said."""

    page: Page
    base: str
    token: str
    name: str
    errors: list[str] = field(default_factory=list)
    finished: bool = False

    def url(self, path: str) -> str:
        return f"{self.base}/ui/{path.lstrip('/')}"

    def sign_in(self, path: str = "pipelines") -> None:
        """Open `path`, land on the sign-in page (signed out), type the token."""
        from playwright.sync_api import expect

        self.page.goto(self.url(path))
        token = self.page.get_by_test_id("signin-token")
        expect(token).to_be_visible(timeout=15_000)
        token.fill(self.token)
        self.page.get_by_test_id("signin-submit").click()
        expect(token).to_have_count(0, timeout=15_000)

    def fill_spec(self, text: str) -> None:
        """The spec editor's text replaced by `text`. On a loaded machine a fill that lands
        while the editor is still taking focus can leave the template's text in place, so
        the fill is checked and made again."""
        editor = self.page.get_by_test_id("spec-editor")
        editor.wait_for(state="visible", timeout=15_000)
        want = " ".join(text.split())
        for _ in range(3):
            editor.fill(text)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                if " ".join(editor.inner_text().split()) == want:
                    return
                self.page.wait_for_timeout(100)
        raise AssertionError(f"the spec editor holds {editor.inner_text()!r}, not {text!r}")

    def unexpected_errors(self) -> list[str]:
        return [e for e in self.errors if not EXPECTED_4XX.search(e)]

    def finish(self) -> None:
        """The end of a test: a screenshot, and no console errors beyond expected 4xx."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"{self.name}.png"), full_page=True)
        self.finished = True
        assert not self.unexpected_errors(), f"browser console errors: {self.unexpected_errors()}"


def _watch(page: Page, errors: list[str]) -> None:
    def on_console(msg: ConsoleMessage) -> None:
        if msg.type == "error":
            errors.append(msg.text)

    def on_pageerror(err: Error) -> None:
        errors.append(f"uncaught: {err.message}")

    page.on("console", on_console)
    page.on("pageerror", on_pageerror)


@pytest.fixture
def ui(chromium: Browser, plat: Platform, request: pytest.FixtureRequest) -> Iterator[UI]:
    """A fresh browser context (signed out: the token lives in sessionStorage) and page."""
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(20_000)
    page = context.new_page()
    (ARTIFACTS / f"{request.node.name}-failed.png").unlink(missing_ok=True)
    u = UI(page, f"http://127.0.0.1:{plat.port}", plat.token, request.node.name)
    _watch(page, u.errors)
    try:
        yield u
    finally:
        if not u.finished:  # a failure: keep what the page looked like
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(Error):
                page.screenshot(path=str(ARTIFACTS / f"{u.name}-failed.png"), full_page=True)
        context.close()
