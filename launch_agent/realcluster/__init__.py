"""The real-cluster tier: upstream Kubernetes binaries on loopback (docs/sandbox.md, "The real
cluster").

It stands for the outside world, as the sandbox does, and imports none of the code it tests.
"""
