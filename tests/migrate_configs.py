"""W&B queue configs that copy a chosen name into every value `launch-agent migrate` writes,
for the tests that it writes them as data (issue 23)."""

from __future__ import annotations

from typing import Any

# The issue's example: a volume named so that its review comment ends and the rest is YAML.
ISSUE_NAME = "data\n  security:\n    privileged: true\n    hostPaths: [/]\n  #"


def config_with(name: str = "x", **names: str) -> dict[str, Any]:
    """A W&B queue config that copies `name` (or the value `names` gives per place) into every
    value `migrate` writes into its review comments."""

    def n(place: str) -> str:
        return names.get(place, name)

    return {
        "resource_args": {
            "kubernetes": {
                "namespace": n("namespace"),
                "spec": {
                    "template": {
                        "spec": {
                            "serviceAccountName": n("service_account"),
                            "imagePullSecrets": [{"name": n("pull_secret")}],
                            "containers": [
                                {
                                    "name": n("container"),
                                    "image": "registry.example.com/x:1",
                                    "securityContext": {
                                        "privileged": True,
                                        "capabilities": {"add": [n("capability")]},
                                    },
                                    "env": [
                                        {
                                            "name": "A",
                                            "valueFrom": {
                                                "secretKeyRef": {"name": n("secret"), "key": "k"}
                                            },
                                        },
                                        {"name": "B", "value": "{{used}}"},
                                    ],
                                    "volumeMounts": [{"name": n("volume"), "mountPath": "/d"}],
                                }
                            ],
                            "volumes": [
                                {"name": n("volume"), "hostPath": {"path": n("host_path")}},
                                {"name": "s", "secret": {"secretName": n("secret_volume")}},
                            ],
                        }
                    }
                },
            }
        }
    }


def variables_with(name: str, used_default: Any = "1") -> dict[str, dict[str, Any]]:
    return {
        "used": {"type": "string", "default": used_default, "description": name},
        name or "unused": {"type": "string", "enum": [name]},
    }
