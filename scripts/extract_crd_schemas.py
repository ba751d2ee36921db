"""Extract the workload CRDs' openAPIV3Schemas into compact JSON shipped with the package.

    python scripts/extract_crd_schemas.py [CRD_DIR]

CRD_DIR defaults to `tests/fixtures/crds` (the vendored upstream CRDs). The output goes to
`launch_agent/render/schemas/crds/<plural>.<group>_<version>.json`; the package never reads
the CRD files at run time. The schemas are changed the way the API server would behave
(the API server prunes or, under `fieldValidation=Strict`, refuses unknown fields):

1. every `type: object` node with `properties`, no `additionalProperties` and no
   `x-kubernetes-preserve-unknown-fields` is closed (`additionalProperties: false`), which is
   what `fieldValidation=Strict` does with unknown fields;
2. a required property that has a `default` is dropped from `required` (the API server fills
   the default before it validates);
3. OpenAPI 3.0 `nullable: true` becomes a JSON Schema type list with "null", so the plain
   `jsonschema` validator the package already depends on gives the same answers as
   `OAS30Validator`.

`description` fields are dropped: they are three quarters of the bytes and no validator reads
them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "launch_agent" / "render" / "schemas" / "crds"

# (file, version) of each workload kind in launch_agent/render/kinds.py.
WANTED = (
    ("jobset.x-k8s.io_jobsets.yaml", "v1alpha2"),
    ("kubeflow.org_pytorchjobs.yaml", "v1"),
    ("trainer.kubeflow.org_trainjobs.yaml", "v1alpha1"),
    ("leaderworkerset.x-k8s.io_leaderworkersets.yaml", "v1"),
    ("ray.io_rayjobs.yaml", "v1"),
    ("batch.volcano.sh_jobs.yaml", "v1alpha1"),
)


def strictify(node: Any) -> Any:
    if isinstance(node, list):
        return [strictify(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "properties" and isinstance(value, dict):
            # Property *names* are kept as they are (a field may be called "description").
            out[key] = {name: strictify(sub) for name, sub in value.items()}
        elif key != "description":
            out[key] = strictify(value)
    props = out.get("properties")
    if isinstance(props, dict):
        if (
            out.get("type") == "object"
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        if "required" in out:
            out["required"] = [r for r in out["required"] if "default" not in props.get(r, {})]
            if not out["required"]:
                del out["required"]
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def main(argv: list[str]) -> int:
    crd_dir = Path(argv[0]) if argv else ROOT / "tests" / "fixtures" / "crds"
    OUT.mkdir(parents=True, exist_ok=True)
    for filename, version in WANTED:
        with (crd_dir / filename).open("rb") as f:
            crd = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        names = crd["spec"]["names"]
        group = crd["spec"]["group"]
        served = next(v for v in crd["spec"]["versions"] if v["name"] == version)
        schema = strictify(served["schema"]["openAPIV3Schema"])
        schema["x-launch-agent-source"] = {
            "file": filename,
            "kind": names["kind"],
            "apiVersion": f"{group}/{version}",
        }
        target = OUT / f"{names['plural']}.{group}_{version}.json"
        target.write_text(json.dumps(schema, separators=(",", ":"), sort_keys=True) + "\n")
        print(f"{target.relative_to(ROOT)}: {target.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
