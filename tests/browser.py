"""Debian's Chromium, headless, driven by Playwright's client (never `playwright install`)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from playwright.async_api import Browser, async_playwright

CHROMIUM = "/usr/bin/chromium"
# No network beyond what the page asks for: no updates, no sync, no QUIC probes.
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextlib.asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    async with async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield browser
        finally:
            await browser.close()
