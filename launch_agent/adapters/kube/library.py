"""What the agent uses of kubernetes_asyncio, imported without its generated API and models.

`import kubernetes_asyncio` runs the package's `__init__`, which imports the 60 generated
API classes and the 800 model classes of `kubernetes_asyncio.client` (860 modules: 0.3-0.4 s
of CPU, most of the agent's start-up and a third of its imports). The agent needs none of
them: it loads configurations (`kubernetes_asyncio.config`) and sends requests through
`ApiClient.call_api` with `_preload_content=False`, which never builds a model.

So before the first import of the library, its three heavy packages (`kubernetes_asyncio`,
`kubernetes_asyncio.client`, `kubernetes_asyncio.client.models`) are put in `sys.modules` as
they would be while their `__init__` is about to run, with `__path__` and `__spec__` set, so
their submodules import as usual. A name looked up on one of them loads it: a submodule is
imported on its own (`client.configuration`), the classes the configuration loaders import
by name (`ApiClient`, `Configuration`) from their own modules, and any other name (`V1Pod`,
`CoreV1Api`, `kubernetes_asyncio.watch`) runs the real `__init__` into the same module
object: code that wants the whole library (tests, the sandbox's tools) gets all of it.

If the library was imported before (a test, another tool in the process), nothing is changed.
The version is pinned (pyproject.toml); `tests/unit/kube/test_library_import.py` checks, in a
fresh interpreter, that the agent's imports load no generated model and that the whole
library still works after them.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

# Names imported from `kubernetes_asyncio.client` by the library's own configuration loaders
# and by this package, and the module that defines each.
CLIENT_NAMES = {
    "ApiClient": "api_client",
    "Configuration": "configuration",
    "ApiException": "exceptions",
    "ApiValueError": "exceptions",
    "ApiTypeError": "exceptions",
    "ApiKeyError": "exceptions",
    "ApiAttributeError": "exceptions",
    "OpenApiException": "exceptions",
}
# Dunder names the packages' `__init__` defines (everything else dunder is left to the import
# system and `inspect`, which probe for names a package need not have).
PACKAGE_DUNDERS = frozenset({"__all__", "__version__", "__project__"})
DEFERRED: dict[str, dict[str, str]] = {
    "kubernetes_asyncio": {},
    "kubernetes_asyncio.client": CLIENT_NAMES,
    "kubernetes_asyncio.client.models": {},
}


def _deferred(name: str, names: dict[str, str]) -> types.ModuleType | None:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    loader = spec.loader

    def __getattr__(attr: str) -> Any:
        if attr.startswith("__") and attr not in PACKAGE_DUNDERS:
            raise AttributeError(attr)  # e.g. `__wrapped__`, probed by inspect
        defined_in = names.get(attr)
        if defined_in is not None:
            return getattr(importlib.import_module(f"{name}.{defined_in}"), attr)
        if importlib.util.find_spec(f"{name}.{attr}") is not None:
            return importlib.import_module(f"{name}.{attr}")
        # Anything else: the package's real `__init__`, once, into this same module.
        del module.__dict__["__getattr__"]
        loader.exec_module(module)
        return module.__dict__[attr] if attr in module.__dict__ else _missing(name, attr)

    module.__dict__["__getattr__"] = __getattr__
    return module


def _missing(name: str, attr: str) -> Any:
    raise AttributeError(f"module {name!r} has no attribute {attr!r}")


def defer_generated_code() -> None:
    """Put the heavy packages in `sys.modules` unloaded (module docstring); idempotent."""
    if "kubernetes_asyncio" in sys.modules:
        return
    for name, names in DEFERRED.items():
        module = _deferred(name, names)
        if module is None:
            return
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)


defer_generated_code()

# Imported only now, after the packages above are in place.
from kubernetes_asyncio.client import ApiClient, Configuration, rest  # noqa: E402
from kubernetes_asyncio.config import (  # noqa: E402
    ConfigException,
    load_incluster_config,
    load_kube_config,
)

__all__ = [
    "ApiClient",
    "ConfigException",
    "Configuration",
    "defer_generated_code",
    "load_incluster_config",
    "load_kube_config",
    "rest",
]
