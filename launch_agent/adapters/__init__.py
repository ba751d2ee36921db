"""Clients of the outside world: W&B GraphQL, Kubernetes, object storage, registries.

The only layer that imports kubernetes_asyncio, boto3, google-cloud-storage or wandb. Every
retried call of both API clients goes through one engine, `retry.py`.
"""
