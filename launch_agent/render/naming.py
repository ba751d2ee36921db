"""Deterministic, DNS-safe names and label values derived from the run-queue-item id.

Submitting the same item twice must address the same object (a 409 on create means "already
submitted, adopt it"), so names come from the item, never from randomness or the clock:

- The workload is `<queue spec name>-<item>`, where `<item>` is the numeric W&B id when the
  base64 id decodes to `RunQueueItem:<digits>` (readable, and the same number W&B shows), and
  otherwise 10 base32 characters of its SHA-256. The spec-name part is cut to fit the kind's
  limit (`kinds.KindInfo.max_name`), never the id part.
- A run without a W&B run id gets an 8-character id (W&B's format) from the same hash, so a
  resubmission reports to the same run.
- Label values keep the id when it already is a valid label value after the URL-safe base64
  substitution (`+`→`-`, `/`→`_`, padding dropped: still one-to-one); otherwise `h-` and a hash.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re

from launch_agent.model.labels import is_label_value

_DIGITS = re.compile(rb"^RunQueueItem:(\d{1,20})$")
_ALNUM36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode()).digest()


def item_short_id(rqi_id: str) -> str:
    """The numeric part of a W&B run-queue-item id, or a 10-character hash."""
    try:
        decoded = base64.b64decode(rqi_id, validate=True)
    except (binascii.Error, ValueError):
        decoded = b""
    m = _DIGITS.match(decoded)
    if m:
        return m.group(1).decode()
    return base64.b32encode(_digest(rqi_id)).decode().lower()[:10]


def workload_name(spec_name: str, rqi_id: str, max_len: int) -> str:
    short = item_short_id(rqi_id)
    room = max_len - len(short) - 1
    head = spec_name[:room].rstrip("-") if room > 0 else ""
    # Service names (PyTorchJob, LWS, JobSet) must start with a letter.
    return f"{head}-{short}" if head else f"r{short}"[:max_len]


def derived_run_id(rqi_id: str) -> str:
    n = int.from_bytes(_digest(rqi_id)[:8], "big")
    chars = []
    for _ in range(8):
        n, r = divmod(n, 36)
        chars.append(_ALNUM36[r])
    return "".join(chars)


def label_value(value: str) -> str:
    """`value` as a label value: itself (URL-safe, unpadded) if valid, else a hash."""
    safe = value.replace("+", "-").replace("/", "_").rstrip("=")
    if is_label_value(safe):
        return safe
    return "h-" + hashlib.sha256(value.encode()).hexdigest()[:40]
