"""Queue spec + run queue item -> Kubernetes manifests. Pure: no I/O, no asyncio."""
