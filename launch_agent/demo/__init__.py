"""`launch-agent demo`: the real agent end to end against the loopback sandbox.

| module | what it holds | I/O |
| --- | --- | --- |
| `scenario.py` | the runs (one per example queue spec and failure), expectations, `judge` | no |
| `world.py` | `SandboxWorld`: API server, simulated cluster, W&B server, CRDs, namespaces | yes |
| `runner.py` | `Demo`: pushes, runs the agent in-process, prints progress and the table | yes |

This package sits in its own layer between `commands` and `runtime | sandbox`: it drives both,
and neither imports it.
"""
