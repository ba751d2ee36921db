"""A loopback HTTP server whose every answer is a flood: huge, endless, or a gzip bomb.

For the clients that have no sandbox server of their own to script (the status command, a
registry's token service, cloud identity endpoints, the Kubernetes client): `Flood.mode` says
how the next answers are sent, and `sent` counts the bytes written to sockets, so a test can
show a client stopped reading at its limit (the rest never left the server's buffers).

- `length`: `size` bytes with a `Content-Length`;
- `chunked`: `size` bytes chunked, no length;
- `endless`: chunked until the client hangs up;
- `gzip`: `Content-Encoding: gzip` of `size` zero bytes (a few KiB on the wire per MiB).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from aiohttp import web

CHUNK = b"x" * 65536


@dataclass
class Flood:
    mode: str = "length"
    size: int = 0
    status: int = 200
    sent: int = 0
    paths: list[str] = field(default_factory=list)
    url: str = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.paths.append(request.raw_path)
        response = web.StreamResponse(
            status=self.status, headers={"Content-Type": "application/json"}
        )
        body_size = self.size
        if request.method == "HEAD":
            return response  # headers only: 200 and no Docker-Content-Digest, for a registry
        if self.mode == "gzip":
            payload = await asyncio.to_thread(_gzip_of_zeros, self.size)
            response.headers["Content-Encoding"] = "gzip"
            response.content_length = len(payload)
            await response.prepare(request)
            await response.write(payload)
            self.sent += len(payload)
            return response
        if self.mode == "length":
            response.content_length = body_size
        else:
            response.enable_chunked_encoding()
        await response.prepare(request)
        left = None if self.mode == "endless" else body_size
        try:
            while left is None or left > 0:
                piece = CHUNK if left is None else CHUNK[:left]
                await response.write(piece)
                self.sent += len(piece)
                if left is not None:
                    left -= len(piece)
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            if request.transport is not None:
                request.transport.abort()
        return response


def _gzip_of_zeros(size: int) -> bytes:
    """gzip of `size` zero bytes, compressed 1 MiB at a time (never `size` bytes at once)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: a gzip header and trailer
    zeros = bytes(1 << 20)
    parts = [
        packer.compress(zeros[: min(len(zeros), size - done)]) for done in range(0, size, 1 << 20)
    ]
    return b"".join(parts) + packer.flush()


@asynccontextmanager
async def flood_server() -> AsyncIterator[Flood]:
    flood = Flood()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", flood.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    flood.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield flood
    finally:
        await runner.cleanup()
