"""Queue spec + run queue item -> Kubernetes manifests. Pure: no I/O, no asyncio.

| module | what |
| --- | --- |
| `spec_load` | queue spec text -> checked `model.queue_spec.QueueSpec` (JSON Schema + semantics) |
| `pipeline` | `render(spec, item, image_uri, settings)`, `pod_sets`, `suspend`, `unsuspend` |
| `kinds` | the one table of workload kinds |
| `policy`, `merge`, `macros`, `wandb_env`, `naming`, `security` | the pipeline's stages |
| `apiserver` | what kube-apiserver and etcd would refuse, refused at runSpec paths first |
| `paths` | the path/glob syntax shared by `overridable`, pod-template paths and errors |
| `output_check` | rendered objects vs Kubernetes' strict schemas and the shipped CRD schemas |
| `sample` | the sample item `launch-agent validate` renders |
| `settings` | `RenderSettings` (from the agent config) and `RenderResult` |

User documentation: docs/queue-specs.md and docs/workload-kinds.md.
"""
