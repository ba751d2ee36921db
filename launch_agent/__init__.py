"""launch-agent: a Kubernetes-native dispatcher for W&B Launch run queues."""

__version__ = "0.1.0"
