"""A workload the API server refuses for a CRD's CEL rule: the run fails with its words.

kube-apiserver applies a CRD's `x-kubernetes-validations` to every create; the agent cannot
run such an object, and the submitter needs the API server's message and the field path to
fix their override. The sandbox applied no CEL rule before, so this run was accepted there.
"""

from __future__ import annotations

from pathlib import Path

from launch_agent.sandbox.wandb import ItemState
from tests.e2e.conftest import CRDS, Env, run_spec, until

TRAINJOB_SPEC = """\
apiVersion: launch-agent/v1
kind: QueueSpec
metadata:
  name: finetune
spec:
  queues: [finetune]
  namespace: default
  template:
    apiVersion: trainer.kubeflow.org/v1alpha1
    kind: TrainJob
    spec:
      runtimeRef:
        name: torch-distributed
      initializer:
        model:
          storageUri: hf://meta-llama/Llama-3.1-8B
      trainer:
        numNodes: 1
  security:
    trainingRuntimes: [torch-distributed]
  overridable:
    - spec.initializer.model.storageUri
    - overrides.args
"""


async def test_a_cr_breaking_a_crd_rule_fails_the_run_with_the_api_servers_message(
    env: Env,
) -> None:
    await env.kube.load_crd_file(CRDS / "trainer.kubeflow.org_trainjobs.yaml")
    (Path(env.specs_dir) / "finetune.yaml").write_text(TRAINJOB_SPEC)
    env.state.add_queue("finetune")
    # The submitter names the model the Hugging Face way, without the scheme the rule wants.
    bad = env.push(
        run_spec(
            "cel1",
            resource_args={
                "kubernetes": {
                    "spec": {"initializer": {"model": {"storageUri": "meta-llama/Llama-3.1-8B"}}}
                }
            },
        ),
        queue="finetune",
    )
    good = env.push(run_spec("cel2"), queue="finetune")
    config = env.config(queues=["finetune"])
    async with env.running(env.agent(config)):
        await until(lambda: bad.state is ItemState.FAILED, message="refused run failed")
        assert bad.failure is not None
        message = bad.failure.message
        for fragment in (
            'TrainJob.trainer.kubeflow.org "',
            'spec.initializer.model.storageUri: Invalid value: "meta-llama/Llama-3.1-8B":',
            "storageUri may be empty, or it must be a valid URI (scheme://...)",
        ):
            assert fragment in message, message
        # Said once: the API server's message already lists its causes.
        assert message.count("storageUri may be empty") == 1, message
        # The next run of the queue, with the admin's default model, goes through.
        await until(lambda: good.state is ItemState.CLAIMED, message="next item claimed")
        assert good.failure is None, good.failure
        created = env.kube.objects.list("trainjobs", namespace="default")
        assert [t["spec"]["initializer"]["model"]["storageUri"] for t in created] == [
            "hf://meta-llama/Llama-3.1-8B"
        ]
