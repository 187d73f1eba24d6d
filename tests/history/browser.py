"""Chromium, driven by Playwright, over a site on disk: the network blocked, console errors and page errors kept.

The browser is the distribution's Chromium (/usr/bin/chromium: Debian's
package, which .ci/run installs), else a Google Chrome on the PATH (GitHub's
Ubuntu runners carry one; Ubuntu's chromium package is a snap wrapper);
Playwright's own browser build is not downloaded. Where neither is found the
browser tests skip with that reason, except under CI (CI=true), where they
fail: CI installs Chromium.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROME = "google-chrome"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def require_chromium() -> str:
    if Path(CHROMIUM).is_file():
        return CHROMIUM
    if chrome := shutil.which(CHROME):
        return chrome
    message = f"no Chromium at {CHROMIUM} and no {CHROME} on the PATH (apt-get install chromium)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@dataclass
class Visit:
    """What one page did: console errors, uncaught errors, and every request that left the disk (blocked)."""

    errors: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)


def open_page(browser, url: str, visit: Visit):
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    page.on("console", lambda m: visit.errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: visit.errors.append(f"page error: {e}"))

    def route(r):
        if r.request.url.startswith("file:"):
            r.continue_()
        else:
            visit.blocked.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.goto(url)
    return page


def wait_for_charts(page) -> int:
    """Waits until every chart on the page has drawn; returns how many there are."""
    count = page.locator(".chart").count()
    if count:
        page.wait_for_function(
            "document.querySelectorAll('.chart[data-drawn]').length === document.querySelectorAll('.chart').length",
            timeout=20000,
        )
    return count
