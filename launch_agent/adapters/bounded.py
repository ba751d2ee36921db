"""Reads that stop at a bound: HTTP bodies, files and standard input.

Every body and every input file the agent and its commands read goes through one of three
functions here, which read in chunks and refuse as soon as more than `limit` bytes came:

- `read_body(response, limit, what=..., setting=...)`: an aiohttp response body. A
  `Content-Length` over the limit is refused before a byte is read; otherwise (chunked, or a
  length that lies) the body is counted as it streams, after decompression, and the connection
  is closed the moment it passes the limit, so the rest is never received. `BodyTooLarge`
  names what was read and the setting that bounds it.
- `read_file(path, limit, what=...)` and `read_stdin(limit, what=...)`: a regular file over
  the limit is refused from its size, unread; otherwise at most `limit + 1` bytes of a file or
  a pipe are read, so `/dev/zero`, a FIFO or an endless pipe costs `limit` bytes,
  not all the memory there is. `InputTooLarge` is an `OSError` (errno `EFBIG`) whose
  `strerror` says what and the limit: callers that report "cannot read: <strerror>" for any
  `OSError` report it without a change.

Why here and not after the read: a size check on what was read already holds it all; a
300 MB answer took 952 MB before the old checks ran, and `/dev/zero` never ends.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
import sys
from pathlib import Path
from typing import Protocol

import aiohttp

CHUNK = 64 * 1024
KIB = 1024
MIB = 1024 * 1024
YIELD_EVERY = MIB
# Service-account and federated tokens are a few KiB; a file bigger than this is not one.
MAX_TOKEN_FILE = MIB


def size_text(limit: int) -> str:
    """`32 MiB`, `64 KiB`, or `1,000,000 bytes`: the limit as an admin would write it."""
    if limit >= MIB and limit % MIB == 0:
        return f"{limit // MIB} MiB"
    if KIB <= limit < MIB and limit % KIB == 0:
        return f"{limit // KIB} KiB"
    return f"{limit:,} bytes"


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes | None: ...


class BodyTooLarge(Exception):
    """An HTTP body over its limit; nothing of it is kept."""

    def __init__(self, what: str, limit: int, setting: str, declared: int | None = None) -> None:
        self.what = what
        self.limit = limit
        self.setting = setting
        self.declared = declared
        said = f" (Content-Length {declared:,})" if declared is not None else ""
        super().__init__(f"{what} is over {size_text(limit)}{said} (limit {setting})")


class InputTooLarge(OSError):
    """A file or standard input over its limit (an `OSError`, errno `EFBIG`). A regular file
    says its size (from `fstat`, nothing read); a stream only that it went past the limit."""

    def __init__(self, name: str, limit: int, what: str, size: int | None = None) -> None:
        self.limit = limit
        self.what = what
        self.size = size
        if size is None:
            text = f"is over {size_text(limit)}, the limit for {what}; not read further"
        else:
            text = f"is {size:,} bytes; the limit is {limit:,} for {what}"
        super().__init__(errno.EFBIG, text, name)


async def read_body(
    response: aiohttp.ClientResponse, limit: int, *, what: str, setting: str
) -> bytes:
    """The whole body if it is at most `limit` bytes (decompressed), else `BodyTooLarge`.

    On refusal the response is closed, which closes its connection: what the server still
    sends is dropped by the kernel, never read into memory.
    """
    declared = response.content_length
    if declared is not None and declared > limit:
        response.close()
        raise BodyTooLarge(what, limit, setting, declared)
    body = bytearray()
    try:
        async for chunk in response.content.iter_chunked(CHUNK):
            body += chunk
            if len(body) > limit:
                raise BodyTooLarge(what, limit, setting)
            if len(body) % YIELD_EVERY < len(chunk):
                # A buffered body is consumed without suspending: let the loop run in between.
                await asyncio.sleep(0)
    except BodyTooLarge:
        response.close()
        raise
    return bytes(body)


def _read_stream(stream: _Readable, limit: int, name: str, what: str) -> bytes:
    body = bytearray()
    while len(body) <= limit:
        # Never more than one byte past the limit: that byte is the proof it was over.
        chunk = stream.read(min(CHUNK, limit + 1 - len(body)))
        if not chunk:
            return bytes(body)
        body += chunk
    raise InputTooLarge(name, limit, what)


def read_file(path: str | os.PathLike[str], limit: int, *, what: str) -> bytes:
    """The file's bytes, at most `limit`; `InputTooLarge` past it, `OSError` as for `open`."""
    with Path(path).open("rb", buffering=0) as stream:
        info = os.fstat(stream.fileno())
        if stat.S_ISREG(info.st_mode) and info.st_size > limit:
            raise InputTooLarge(str(path), limit, what, info.st_size)
        # A regular file that grows while read, a device or a FIFO: bounded while reading.
        return _read_stream(stream, limit, str(path), what)


def read_stdin(limit: int, *, what: str, name: str = "<stdin>") -> bytes:
    """Standard input's bytes, at most `limit`; `InputTooLarge` past it."""
    return _read_stream(sys.stdin.buffer, limit, name, what)


def decode_text(data: bytes) -> str:
    """UTF-8 with universal newlines, as `Path.read_text` and `sys.stdin` read text."""
    return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")


def read_text_file(path: str | os.PathLike[str], limit: int, *, what: str) -> str:
    """`read_file` as text, like `Path.read_text` (`UnicodeDecodeError` if not UTF-8)."""
    return decode_text(read_file(path, limit, what=what))
