"""Label and annotation keys the agent stamps on everything it creates.

Our own keys live under `launch-agent.io/`. A restarted agent lists its workloads by these
labels and rebuilds its state from them, so they are part of the on-cluster contract and
change only with a migration. W&B's own `wandb.ai/run-id` and `wandb.ai/agent` are set too,
because dashboards and scripts written for `wandb launch-agent` select on them.

Label values must be at most 63 characters of `[A-Za-z0-9_.-]`, starting and ending with an
alphanumeric. W&B run-queue-item ids are base64 (`UnVuUXVldWVJdGVtOjE=`), so the label carries a
label-safe form and the exact id is kept in an annotation.
"""

from __future__ import annotations

import re

PREFIX = "launch-agent.io/"

AGENT = PREFIX + "agent"
QUEUE = PREFIX + "queue"
RUN_QUEUE_ITEM = PREFIX + "run-queue-item"
RUN_ID = PREFIX + "run-id"

# Annotations: exact values that may not fit a label.
RUN_QUEUE_ITEM_ID = PREFIX + "run-queue-item-id"
QUEUE_NAME = PREFIX + "queue-name"
QUEUE_SPEC = PREFIX + "queue-spec"
ENTITY = PREFIX + "entity"
PROJECT = PREFIX + "project"
# The run's own containers (comma-separated names, one per pod template) and its image: the
# tracker and `diagnose` blame them before sidecars (tracking/pods.py `MainContainer`).
MAIN_CONTAINERS = PREFIX + "main-containers"
RUN_IMAGE = PREFIX + "image"

# W&B's keys, for tools written against `wandb launch-agent`.
WANDB_RUN_ID = "wandb.ai/run-id"
WANDB_AGENT = "wandb.ai/agent"

KUEUE_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
# A Kueue WorkloadPriorityClass (kueue `pkg/controller/constants`, `WorkloadPriorityClassLabel`).
KUEUE_PRIORITY_CLASS = "kueue.x-k8s.io/priority-class"
GKE_ML_DIAGNOSTICS = "managed-mldiagnostics-gke"

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_VALUE_MAX = 63


def is_label_value(value: str) -> bool:
    """True if `value` is a valid Kubernetes label value."""
    return len(value) <= LABEL_VALUE_MAX and LABEL_VALUE.match(value) is not None


# `IsQualifiedName` (apimachinery `pkg/util/validation/validation.go`): label keys and
# annotation keys are an optional DNS-subdomain prefix and `/`, then a name part.
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def is_qualified_name(key: str) -> bool:
    """True if `key` is a valid label or annotation key."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (0 < len(prefix) <= 253 and _DNS1123_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and _NAME_PART.match(name) is not None
