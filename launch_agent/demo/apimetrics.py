"""kube-apiserver's own request counts, read from its `/metrics` text, for the benchmarks.

A snapshot counts, per `VERB resource[/subresource]`, the resource requests the API server has
*started*: the finished ones (`apiserver_request_total`, where a watch is counted only when it
ends) plus the long-running ones open now (`apiserver_longrunning_requests`, the watches). So
the difference of two snapshots is the requests started between them: a watch opened in the
window and still open counts once, one opened before and closed in it counts zero.
Non-resource requests (`/metrics`, `/readyz`, discovery documents) are left out.

Pure: the text in, counts out.
"""

from __future__ import annotations

import re

TOTAL = "apiserver_request_total"
LONG_RUNNING = "apiserver_longrunning_requests"
# What kube-apiserver asks of itself on an idle cluster (its identity Lease renewed every
# 10 s, its check of the system namespaces every minute): not any client's requests.
UPKEEP = frozenset({"GET leases", "PUT leases", "GET namespaces"})

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\{(?P<labels>.*)\}\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class MetricsError(ValueError):
    """A sample line that does not parse: names the line and why."""


def parse_labels(text: str) -> dict[str, str]:
    return {
        key: value.replace('\\"', '"').replace("\\\\", "\\") for key, value in _LABEL.findall(text)
    }


def request_counts(text: str) -> dict[str, int]:
    """Resource requests started so far, by `VERB resource[/subresource]`."""
    counts: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.startswith((TOTAL + "{", LONG_RUNNING + "{")):
            continue
        sample = _SAMPLE.match(line)
        if sample is None:
            raise MetricsError(f"/metrics line {number}: not a sample: {line[:200]!r}")
        labels = parse_labels(sample["labels"])
        resource = labels.get("resource", "")
        if not resource:
            continue
        try:
            value = int(float(sample["value"]))
        except ValueError:
            raise MetricsError(
                f"/metrics line {number}: value {sample['value']!r} is not a number"
            ) from None
        sub = labels.get("subresource", "")
        key = f"{labels.get('verb', '?')} {resource}" + (f"/{sub}" if sub else "")
        counts[key] = counts.get(key, 0) + value
    return counts


def started_between(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    """Requests started between two snapshots, by route (routes with none left out)."""
    out = {key: after.get(key, 0) - before.get(key, 0) for key in sorted({*after, *before})}
    return {key: value for key, value in out.items() if value}


def clients_only(routes: dict[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """(the clients' routes, the API server's own upkeep) of a window's requests."""
    clients = {k: v for k, v in routes.items() if k not in UPKEEP}
    upkeep = {k: v for k, v in routes.items() if k in UPKEEP}
    return clients, upkeep
