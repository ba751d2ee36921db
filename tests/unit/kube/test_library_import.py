"""kubernetes_asyncio imported without its generated API and models (`adapters/kube/library.py`).

Each check runs in a fresh interpreter: the test process has imported the whole library long
before (the sandbox's tests do), and then the deferral rightly does nothing.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_agent_imports_no_generated_model_or_api() -> None:
    out = _run(
        """
        import sys
        import launch_agent.commands.run_cmd
        generated = [
            m for m in sys.modules
            if m.startswith(("kubernetes_asyncio.client.models.", "kubernetes_asyncio.client.api."))
        ]
        print(len(generated), "kubernetes_asyncio.watch" in sys.modules)
        """
    )
    assert out.split() == ["0", "False"]


def test_the_whole_library_still_loads_on_demand_after_the_agents_imports() -> None:
    out = _run(
        """
        import launch_agent.adapters.kube
        import kubernetes_asyncio
        from kubernetes_asyncio import client, config, watch
        from kubernetes_asyncio.client import ApiClient, Configuration, V1Pod
        import kubernetes_asyncio.client.models as models
        assert client.CoreV1Api.__module__ == "kubernetes_asyncio.client.api.core_v1_api"
        assert models.V1Job is client.V1Job
        assert V1Pod(metadata=client.V1ObjectMeta(name="p")).metadata.name == "p"
        assert isinstance(watch.Watch, type) and callable(config.load_kube_config)
        assert isinstance(Configuration().host, str)
        print(kubernetes_asyncio.__version__, ApiClient.__name__)
        """
    )
    assert out.split() == ["36.1.0", "ApiClient"]


def test_an_unknown_name_is_an_attribute_error_after_the_real_init_ran() -> None:
    out = _run(
        """
        import launch_agent.adapters.kube
        import kubernetes_asyncio.client as client
        try:
            client.NoSuchThing
        except AttributeError as exc:
            print("AttributeError", "NoSuchThing" in str(exc), hasattr(client, "V1Pod"))
        """
    )
    assert out.split() == ["AttributeError", "True", "True"]


@pytest.mark.parametrize("first", ["import kubernetes_asyncio", "import kubernetes_asyncio.client"])
def test_nothing_is_deferred_when_the_library_was_imported_first(first: str) -> None:
    out = _run(
        f"""
        import sys
        {first}
        import launch_agent.adapters.kube
        print("kubernetes_asyncio.client.models.v1_pod" in sys.modules)
        """
    )
    assert out.split() == ["True"]
