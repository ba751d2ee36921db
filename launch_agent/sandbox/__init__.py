"""Loopback stand-ins for the outside world: a Kubernetes API server, a simulated cluster and
a W&B Launch server. They follow the real APIs and import nothing of the code they test."""
