"""Workload and pod status -> run state and diagnosis. Pure: no I/O, no asyncio."""
