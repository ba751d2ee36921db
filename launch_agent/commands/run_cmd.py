"""`launch-agent run`: the agent process (what `wandb launch-agent` is for W&B)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from launch_agent.adapters.wandb_errors import WandbAuthError, WandbError
from launch_agent.commands.config_cmd import add_config_flags, load_config, report_config_error
from launch_agent.model.config_resolve import ConfigError
from launch_agent.runtime.agent import Agent
from launch_agent.runtime.logs import configure_logging
from launch_agent.runtime.startup import StartupError
from launch_agent.runtime.tools import check_tools

log = logging.getLogger("launch_agent.run")

DESCRIPTION = """\
Run the agent: poll the configured W&B run queues, render each run from its queue spec,
create it in Kubernetes (exactly once: created before it is acked, deterministic names, a 409
adopts), track it with watches and report every failure to W&B with a reason and the tail of
the failing container's log. See docs/agent.md.

Images: a run of a job without an image (git source or code artifact) is built first with a
Kaniko Job when builder.type is kaniko (skipped when the registry already has the tag;
docs/builds.md). Admission: max_jobs alone, or with quota.mode agent the elastic quota tree
(runs wait suspended until their leaf has quota), or with quota.mode kueue Kueue decides and
the agent reports its decisions to W&B (docs/quota.md).

Kubernetes access: the pod's service account in a cluster, otherwise --kubeconfig or
$KUBECONFIG (default ~/.kube/config) with its current-context or --context. /healthz, /readyz
and /metrics are served on health.port (default 8080).

SIGTERM or SIGINT stops popping, reports KILLED to W&B, lets in-flight creates finish within
shutdown_grace_seconds and leaves running workloads for the next start to adopt.

Exit status: 0 after a clean stop, 1 if the agent cannot start (a key W&B refuses, missing
queues, ...), 2 for an invalid configuration.
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "run",
        help="run the agent (poll W&B, create workloads, track and report them)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_flags(parser)
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig to use outside a cluster (default: $KUBECONFIG, then ~/.kube/config)",
    )
    parser.add_argument(
        "--context",
        metavar="NAME",
        help="kubeconfig context to use (default: the kubeconfig's current-context)",
    )
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        resolved = load_config(args)
    except ConfigError as exc:
        return report_config_error(exc)
    config = resolved.config
    secrets = [config.api_key.get_secret_value()] if config.api_key else []
    handler = configure_logging(config.log_format, config.verbosity, secrets)
    try:
        for warning in resolved.warnings:
            log.warning("configuration: %s", warning)
        check_tools(config, os.environ)
        agent = Agent(config, kubeconfig=args.kubeconfig, kube_context=args.context)
        asyncio.run(agent.run(install_signals=True))
    except (StartupError, WandbAuthError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except WandbError as exc:
        print(f"error: W&B: {exc}", file=sys.stderr)
        return 1
    finally:
        logging.getLogger("launch_agent").removeHandler(handler)
    return 0
