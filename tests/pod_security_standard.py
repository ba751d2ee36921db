"""The lists the Kubernetes Pod Security Standards enumerate, for the tests' own checkers.

Copied from the standard (https://kubernetes.io/docs/concepts/security/pod-security-standards/,
Kubernetes v1.33), not imported from the product: the tests check the product's enforcement
(`launch_agent/render/security.py`) and the Helm chart against the standard, not against
themselves. The chart suite, the render suite and `tests/pss_checker.py` share this one copy.
"""

from __future__ import annotations

# Baseline: Sysctls ("Allowed Values").
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
# Restricted: Volume Types.
ALLOWED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)

# "Restricted: Capabilities": containers must drop ALL and may add back only this one.
RESTRICTED_CAPABILITY_ADDS = frozenset({"NET_BIND_SERVICE"})
# "Baseline: Seccomp" / "AppArmor" on older clusters: the allowed values of the legacy
# annotations (`seccomp.security.alpha.kubernetes.io/pod`,
# `container.seccomp.security.alpha.kubernetes.io/*`,
# `container.apparmor.security.beta.kubernetes.io/*`); `localhost/<profile>` is allowed too.
LEGACY_SECCOMP_VALUES = frozenset({"runtime/default", "docker/default"})
LEGACY_APPARMOR_VALUES = frozenset({"runtime/default"})
# Restricted: Capabilities ("may only add back the NET_BIND_SERVICE capability").
ADDABLE_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
# Baseline: SELinux ("Allowed Values" of seLinuxOptions.type; user and role must be unset).
SELINUX_TYPES = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
# Restricted: Seccomp (field) and Baseline: AppArmor (field).
SECCOMP_TYPES = frozenset({"RuntimeDefault", "Localhost"})
APPARMOR_FORBIDDEN_TYPES = frozenset({"Unconfined"})
# Baseline: AppArmor, legacy annotation `container.apparmor.security.beta.kubernetes.io/*`:
# allowed values are `runtime/default`, `localhost/*` or unset.
APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"
APPARMOR_ANNOTATION_VALUES = frozenset({"runtime/default"})
# The pre-1.19 seccomp annotations (`seccomp.security.alpha.kubernetes.io/pod`,
# `container.seccomp.security.alpha.kubernetes.io/<name>`): the API server still copies them
# into the field for pods that do not set it, so `unconfined` there is an unconfined pod.
SECCOMP_POD_ANNOTATION = "seccomp.security.alpha.kubernetes.io/pod"
SECCOMP_CONTAINER_ANNOTATION_PREFIX = "container.seccomp.security.alpha.kubernetes.io/"
SECCOMP_ANNOTATION_VALUES = frozenset({"runtime/default", "docker/default"})
# Baseline: /proc Mount Type.
PROC_MOUNT_TYPES = frozenset({"Default"})
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
