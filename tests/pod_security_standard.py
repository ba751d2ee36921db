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
