"""The agent outside the cluster, with a kubeconfig whose exec plugin hands out expiring tokens.

The sandbox API server accepts only the current token (`accept_tokens`), as EKS accepts an
`aws eks get-token` token for 15 minutes. The agent must keep creating runs across a rotation,
and a credential it cannot renew must leave the run in W&B, not fail it.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from launch_agent.sandbox.kube import write_kubeconfig
from launch_agent.sandbox.wandb import ItemState
from tests.e2e.conftest import Env, run_spec, until
from tests.exec_credentials import exec_user, install


async def test_runs_are_created_across_a_token_rotation(env: Env) -> None:
    credentials = await install(env.kubeconfig.parent, "token-1")
    await asyncio.to_thread(
        write_kubeconfig, env.kubeconfig, env.kube.url, "default", exec_user(credentials)
    )
    env.kube.accept_tokens("token-1")
    first = env.push(run_spec("r1"))
    async with env.running():
        await until(lambda: first.state is ItemState.CLAIMED, message="r1 created")
        env.kube.accept_tokens("token-2")  # token-1 expired
        await credentials.hand_out("token-2")
        second = env.push(run_spec("r2"))
        await until(lambda: second.state is ItemState.CLAIMED, message="r2 created")
    assert first.failure is None and second.failure is None
    assert len(env.jobs()) == 2


async def test_a_refused_credential_leaves_the_run_in_wandb(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    first = env.push(run_spec("r1"))
    async with env.running():
        await until(lambda: first.state is ItemState.CLAIMED, message="r1 created")
        env.kube.accept_tokens("a-token-the-agent-does-not-have")
        caplog.set_level(logging.INFO)
        second = env.push(run_spec("r2"))
        await until(
            lambda: any("left for a later pop" in r.getMessage() for r in caplog.records),
            message="the create was refused with 401 and the item left",
        )
        await asyncio.sleep(0.5)  # more pops and creates, all refused the same way
        assert second.failure is None, second.failure
        assert second.state is ItemState.LEASED, "left in W&B until its lease lapses"
    assert len(env.jobs()) == 1
