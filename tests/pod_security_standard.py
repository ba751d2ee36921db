"""The lists the Kubernetes Pod Security Standards enumerate, for the tests' own checkers.

Copied from the standard (https://kubernetes.io/docs/concepts/security/pod-security-standards/,
"Baseline: Sysctls" and "Restricted: Volume Types"), not imported from the product: the tests
check the product's enforcement (`launch_agent/render/security.py`) and the Helm chart against
the standard, not against themselves. The chart and render suites share this one copy.
"""

from __future__ import annotations

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
# "Baseline: SELinux": allowed `seLinuxOptions.type` values (user and role must be unset).
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "init_t"})
# "Baseline: Seccomp" / "AppArmor" on older clusters: the allowed values of the legacy
# annotations (`seccomp.security.alpha.kubernetes.io/pod`,
# `container.seccomp.security.alpha.kubernetes.io/*`,
# `container.apparmor.security.beta.kubernetes.io/*`); `localhost/<profile>` is allowed too.
LEGACY_SECCOMP_VALUES = frozenset({"runtime/default", "docker/default"})
LEGACY_APPARMOR_VALUES = frozenset({"runtime/default"})
