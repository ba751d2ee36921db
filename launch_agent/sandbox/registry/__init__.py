"""A small Docker Registry HTTP API v2 server with token auth, for registry client tests."""

from launch_agent.sandbox.registry.server import RegistryServer

__all__ = ["RegistryServer"]
