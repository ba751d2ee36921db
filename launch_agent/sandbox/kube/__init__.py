"""A loopback Kubernetes API server for tests, the demo and benchmarks.

It speaks the real wire protocol (kubectl and kubernetes_asyncio work against it unchanged)
and keeps kube-apiserver's semantics where the launch agent can observe them: see
`docs/sandbox.md` for the list. Nothing runs inside it: Jobs stay as they were created until a
test, or the simulated cluster (`launch_agent.sandbox.cluster`), acts on them.

Interface (stable; the W&B sandbox command and other tests start it this way)::

    from launch_agent.sandbox.kube import KubeApiServer, write_kubeconfig

    async with KubeApiServer(host="127.0.0.1", port=0) as kube:   # port 0 = a free port
        kube.url                       # "http://127.0.0.1:PORT"
        kube.faults                    # launch_agent.sandbox.faults.Faults (route keys below)
        kube.log                       # RequestLog: bounded entries, per-route counts
        kube.register_crd(crd_dict)    # or: await kube.load_crd_file(path)
        await kube.load_crds_from(directory)   # every *.yaml CRD in a directory
        kube.objects.create("jobs", job_dict, namespace="default")
        kube.objects.get("jobs", "name"); kube.objects.list("pods", label_selector="a=b")
        kube.objects.patch("jobs", "name", {"spec": {...}})          # merge | strategic | json
        kube.objects.patch_status("jobs", "name", {"succeeded": 1})  # via the /status rules
        kube.objects.delete("jobs", "name", propagation="Background")
        kube.objects.logs("pod", "container")
        kube.compact(); kube.drop_watches("pods")
        await kube.refuse_connections(); await kube.accept_connections()
        kube.throttle(qps=20, burst=5)   # 429s as priority and fairness sends them
    write_kubeconfig(path, kube.url, namespace="default")

Fault route keys are "VERB resource[/subresource]" with VERB one of GET, LIST, WATCH, POST,
PUT, PATCH, DELETE, DELETECOLLECTION, e.g. "POST jobs", "WATCH pods", "PATCH jobs/status",
"LIST pytorchjobs", "GET pods/log".
"""

from launch_agent.sandbox.kube.apiserver import KubeApiServer, write_kubeconfig
from launch_agent.sandbox.kube.resources import CrdError, ResourceType
from launch_agent.sandbox.kube.store import Store

__all__ = ["CrdError", "KubeApiServer", "ResourceType", "Store", "write_kubeconfig"]
