"""The status page in a real headless Chromium, against an agent on the sandbox.

The page is never reloaded by the test: every change the assertions wait for arrives through
the page's own `<meta http-equiv="refresh">`, so these tests also prove that it refreshes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from playwright.async_api import Browser, Page

from launch_agent.runtime.agent import Agent
from launch_agent.sandbox.wandb import ItemState
from tests.browser import chromium
from tests.e2e.conftest import Env, run_spec, until
from tests.e2e.test_quota_agent import TREE, setup

TOKEN = "browser-token-0b7e"  # a known value the page must never show
EVIL = "<script>document.title='pwned'</script>"
WAIT_MS = 20_000


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as browser:
        yield browser


async def open_page(browser: Browser, agent: Agent) -> Page:
    context = await browser.new_context(extra_http_headers={"Authorization": f"Bearer {TOKEN}"})
    page = await context.new_page()
    response = await page.goto(f"http://127.0.0.1:{agent.health_port}/")
    assert response is not None and response.status == 200
    return page


async def test_page_shows_a_run_appearing_then_failing(env: Env, browser: Browser) -> None:
    config = env.config(status={"token": TOKEN, "refresh_seconds": 1})
    async with env.running(env.agent(config)) as agent:
        page = await open_page(browser, agent)
        assert "test-agent" in await page.title()
        assert await page.inner_text("#agent") != ""
        assert "No run in flight." in await page.inner_text("#runs")

        env.cluster.script("launch-agent.io/run-id=r1", f'fail after=5s log="{EVIL}"')
        item = env.push(run_spec("r1"))
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        row = page.locator("#runs tr", has_text=item.id)
        await row.wait_for(timeout=WAIT_MS)
        link = row.locator("a")
        assert await link.get_attribute("href") == f"{env.wandb.url}/ent/proj/runs/r1"

        env.advance(10)
        await until(lambda: item.state is ItemState.FAILED, message="failure")
        failure = page.locator("#failures tr", has_text=item.id)
        await failure.wait_for(timeout=WAIT_MS)
        text = await failure.inner_text()
        assert "run" in text and EVIL in text  # shown as text, not run as markup
        await page.locator("#runs", has_text="No run in flight.").wait_for(timeout=WAIT_MS)
        assert await page.title() != "pwned"
        assert await page.locator("script").count() == 0
        assert TOKEN not in await page.content()
        assert env.wandb.api_key not in await page.content()


async def test_quota_bars_move(env: Env, browser: Browser) -> None:
    setup(env, {"a": "a.1", "b": "b.1"}, cpu={"a": 2})
    quota = {"mode": "agent", "tree": TREE, "max_pending_per_leaf": 2}
    status = {"token": TOKEN, "refresh_seconds": 1}
    agent = env.agent(env.config(queues=["qa", "qb"], quota=quota, status=status))
    async with env.running(agent):
        page = await open_page(browser, agent)
        bar = page.locator('#quota tr:has-text("a.1") .bar[data-resource="cpu"]')
        assert await bar.get_attribute("data-used") == "0"
        blue = bar.locator(".fill").first
        assert await blue.evaluate("e => e.getBoundingClientRect().width") == 0

        env.push(run_spec("r1"), queue="qa")
        await page.locator('#quota .bar[data-used="2"]').first.wait_for(timeout=WAIT_MS)
        env.push(run_spec("r2"), queue="qa")
        moved = page.locator('#quota tr:has-text("a.1") .bar[data-used="4"]')
        await moved.wait_for(timeout=WAIT_MS)
        # Half of a.1's max within its min (blue), half borrowed (amber), drawn by the browser.
        outer = await moved.evaluate("e => e.getBoundingClientRect().width")
        within = await moved.locator(".fill").first.evaluate("e => e.getBoundingClientRect().width")
        borrowed = await moved.locator(".borrow").evaluate("e => e.getBoundingClientRect().width")
        assert within > 0 and borrowed > 0
        assert abs(within - borrowed) <= 1.5 and abs(within + borrowed - outer) <= 3
