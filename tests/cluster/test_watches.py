"""The agent's informers through a compacted history (410 Gone) and bookmarks, on either tier,
losing and repeating no report (docs/architecture.md, "Informers").

The agent runs with a short server-side watch timeout, so every informer reconnects from its
resourceVersion every few seconds, as it would after a dropped connection. While its runs are
in flight the test writes many objects it does not watch and then compacts the API server's
history to the current revision. What each tier does with that, in its own way:

- real: etcd is compacted through its HTTP gateway. kube-apiserver serves the watches of Jobs
  and Pods from its watch cache, whose history does not follow etcd's compaction (it keeps 75 s
  of events, `staging/src/k8s.io/apiserver/pkg/storage/cacher/watch_cache_history.go`), and
  sends each of those watches a BOOKMARK 2 s before its timeout (`cache_watcher.go`,
  `nextBookmarkTime`), so those informers resume from the bookmark with no 410. Events have no
  watch cache (`pkg/kubeapiserver/default_storage_factory_builder.go`): that watch is etcd's
  own, and its resume from a compacted revision answers 410, so the Warning-Event informer
  relists.
- sandbox: its compaction forgets every resource's event log at once (harsher than a real
  server: docs/sandbox.md); its Events watches send no bookmark either, so the Warning-Event
  informer relists the same way, and the others do when no bookmark reached them in between.

Either way every run ends once in W&B, with one Job each.
"""

from __future__ import annotations

from launch_agent.adapters.kube import InformerSettings
from launch_agent.adapters.kube.informer import Informer
from launch_agent.runtime.agent import Agent
from launch_agent.sandbox.wandb import ItemState
from tests.cluster.test_jobs import JOB_SPEC
from tests.cluster.world import World, reported_once, run_spec, until

WATCH_TIMEOUT = 8  # seconds: each informer's watch ends (and is reopened) this often
CHURN = 60  # objects written between the runs' start and the compaction


def informers(agent: Agent) -> dict[str, Informer]:
    tracker = agent.tracker
    assert tracker is not None
    every = {**tracker.informers.informers, **tracker.event_informers.informers}
    return {resource.kind: informer for (resource, _), informer in every.items()}


async def churn(world: World, count: int) -> None:
    """Writes the agent watches none of: history moves on past its resourceVersions."""
    for n in range(count):
        await world.create(
            "v1",
            "configmaps",
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"churn-{n}"}},
        )


async def test_runs_are_reported_once_through_a_compacted_history_and_bookmarks(
    world: World,
) -> None:
    world.write_spec("basic.yaml", JOB_SPEC)
    outcomes = {f"w-{n}": "succeed after=14s" for n in range(4)}
    outcomes |= {f"w-f{n}": 'exit code=3 after=14s log="diverged"' for n in range(2)}
    expected = {r: ItemState.FAILED if r.startswith("w-f") else ItemState.CLAIMED for r in outcomes}
    items = {run: world.push(run_spec(run)) for run in outcomes}
    for run, outcome in outcomes.items():
        await world.script(f"launch-agent.io/run-id={run}", outcome)
    settings = InformerSettings(backoff_base=0.05, backoff_cap=0.5, watch_timeout=WATCH_TIMEOUT)
    agent = world.agent(informer_settings=settings)
    async with world.running(agent):
        await until(
            lambda: all(i.state is ItemState.CLAIMED for i in items.values()),
            within=120,
            message="every run claimed",
        )
        watching = informers(agent)
        assert {"Job", "Pod", "Event"} <= set(watching), sorted(watching)
        before = {kind: informer.stats.relists_after_gone for kind, informer in watching.items()}
        await churn(world, CHURN)
        await world.compact()
        # Within one watch timeout every informer has reconnected from its resourceVersion.
        await until(
            lambda: watching["Event"].stats.relists_after_gone > before["Event"],
            within=WATCH_TIMEOUT * 4,
            message="the Event informer relisted after a 410",
        )
        await until(
            lambda: all(i.state is expected[run] for run, i in items.items()),
            within=180,
            message="every run reported",
        )
        await until(lambda: not list(agent.runs), within=60, message="every run released")
        bookmarks = {kind: informer.stats.bookmarks for kind, informer in watching.items()}
        gone = {
            kind: informer.stats.relists_after_gone - before[kind]
            for kind, informer in watching.items()
        }
    for run, item in items.items():
        assert reported_once(item, expected[run]), (run, item.history)
        assert item.pops == 1, (run, item.pops)
        if expected[run] is ItemState.FAILED:
            assert item.failure is not None
            assert "exited with code 3" in item.failure.message, item.failure.message
    jobs = await world.objects("batch/v1", "jobs")
    runs = sorted(j["metadata"]["labels"]["launch-agent.io/run-id"] for j in jobs)
    assert runs == sorted(outcomes), runs
    # Both tiers bookmark the cached kinds' watches (the sandbox every 5 s, kube-apiserver 2 s
    # before each watch's timeout), and never the Events watch: etcd's own sends none, so its
    # resourceVersion stayed behind the compaction, and its resume was answered 410.
    assert bookmarks["Job"] > 0 and bookmarks["Pod"] > 0, bookmarks
    assert bookmarks["Event"] == 0, bookmarks
    if world.tier == "real":
        # The watch cache resumed the Jobs and Pods watches from their bookmarks: etcd's
        # compaction is not its history. (The sandbox's compaction forgets every kind's log,
        # so there they relist or not as the last bookmark fell before or after it.)
        assert gone["Job"] == 0 and gone["Pod"] == 0, gone
