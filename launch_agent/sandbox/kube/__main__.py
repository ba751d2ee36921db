"""`python -m launch_agent.sandbox.kube`: the API server alone, in its own process.

Benchmarks run it this way so that the server and the client under test do not share one
event loop (on a 2-core machine, one core each). It prints `KUBE_URL=http://HOST:PORT` on the
first line of stdout once it accepts connections, then serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import signal
import sys
from pathlib import Path

from launch_agent.sandbox.kube.apiserver import KubeApiServer


async def serve(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with KubeApiServer(
        args.host,
        args.port,
        event_log_size=args.event_log_size,
        bookmark_interval=args.bookmark_interval,
    ) as kube:
        for directory in args.crds or ():
            await kube.load_crds_from(Path(directory))
        print(f"KUBE_URL={kube.url}", flush=True)
        await stop.wait()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m launch_agent.sandbox.kube", description=__doc__
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--crds", action="append", metavar="DIR", help="register every CRD in DIR")
    parser.add_argument(
        "--event-log-size", type=int, default=10_000, help="events kept per resource"
    )
    parser.add_argument(
        "--bookmark-interval", type=float, default=5.0, help="seconds between BOOKMARKs"
    )
    args = parser.parse_args(argv)
    # Stored objects are long-lived: with the default thresholds the collector rescans every
    # stored object again and again as the store grows (creates/s fell from 1,160 to 820
    # between 2,000 and 10,000 Jobs). Young-generation collections stay frequent.
    gc.set_threshold(50_000, 50, 1_000)
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(serve(args))
    return 130


if __name__ == "__main__":
    sys.exit(main())
