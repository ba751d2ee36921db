"""The sandbox kubelet's pod IPs: a real API server validates `status.podIPs`, so every UID must
give a valid address (one that starts `ff` gave 10.244.0.256, and the node simulator's status
write of that pod was refused with 422 for good, leaving a JobSet's pod Pending forever)."""

from __future__ import annotations

import ipaddress

from launch_agent.sandbox.cluster.kubelet import pod_ip


def test_every_uid_gives_a_host_address_of_the_pod_network() -> None:
    network = ipaddress.ip_network("10.244.0.0/24")
    for first in range(256):
        address = ipaddress.ip_address(pod_ip(f"{first:02x}3e5c1a-0000-4000-8000-000000000000"))
        assert address in network.hosts(), (first, address)
