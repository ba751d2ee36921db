"""Which warnings to report for a run, each once.

The reference agent de-duplicates warnings across the whole agent by text (the same OOM in a
second run is never reported) and keeps every message forever. Here the "already reported" set
belongs to one run, is keyed by `Diagnosis.key` (reason, container, image, exit code: the same
OOM in a retried pod is one warning) and is bounded, so a crash-looping run with ever-new exit
codes cannot grow it without limit.
"""

from __future__ import annotations

from collections.abc import Iterable

from launch_agent.model.run_state import Diagnosis

# Distinct warnings worth sending for one run; past this the run has bigger problems and the
# terminal diagnosis will say so.
MAX_REPORTED_PER_RUN = 32


def new_warnings(
    candidates: Iterable[Diagnosis | None],
    reported: frozenset[str],
    limit: int = MAX_REPORTED_PER_RUN,
) -> tuple[tuple[Diagnosis, ...], frozenset[str]]:
    """The warnings not reported yet, and the updated set of reported keys.

    Terminal diagnoses are not warnings (they end the run through another path) and are skipped.
    Once `limit` keys are reported nothing more is returned.
    """
    fresh: list[Diagnosis] = []
    keys = set(reported)
    for diag in candidates:
        if diag is None or diag.terminal or diag.key in keys:
            continue
        if len(keys) >= limit:
            break
        keys.add(diag.key)
        fresh.append(diag)
    return tuple(fresh), frozenset(keys)
