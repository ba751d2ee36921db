"""The soak's arithmetic: least-squares slopes and the Prometheus text it reads."""

from __future__ import annotations

from launch_agent.demo.soak import METRICS, parse_metrics, slope, slopes


def test_slope_is_the_least_squares_fit() -> None:
    assert slope([(0, 1), (1, 3), (2, 5)]) == 2.0
    assert slope([(0, 4), (1, 4), (2, 4)]) == 0.0
    assert round(slope([(0, 0), (1, 2), (2, 1)]), 6) == 0.5
    assert slope([(1, 5)]) == 0.0 and slope([(1, 5), (1, 7)]) == 0.0


def test_parse_metrics_sums_labelled_series() -> None:
    text = (
        "# HELP launch_agent_runs Runs\n# TYPE launch_agent_runs gauge\n"
        'launch_agent_runs{state="running"} 3.0\nlaunch_agent_runs{state="pending"} 2.0\n'
        "launch_agent_asyncio_tasks 17.0\n"
    )
    assert parse_metrics(text) == {"launch_agent_runs": 5.0, "launch_agent_asyncio_tasks": 17.0}


def test_steady_slopes_leave_out_the_warm_up() -> None:
    # RSS climbs while the cluster fills (minutes 0-5), then holds: the whole-soak slope is
    # positive, the steady one (from minute 6) is flat.
    samples = [
        dict.fromkeys(METRICS, 0.0) | {"minute": float(m), "rss_mb": 100.0 + min(m, 5) * 4}
        for m in range(12)
    ]
    assert slopes(samples)["rss_mb"] > 1
    assert slopes(samples, from_minute=6)["rss_mb"] == 0.0
    assert set(slopes(samples, from_minute=6)) == set(METRICS)
