"""Make the schemas `airlock k8s render`'s output is validated against (crates/airlock-k8s/schemas/),
from their sources, so that the test data can be checked and made again:

  - Kubernetes 1.37's own OpenAPI schemas, strict (an unknown field is an error), as the PyPI
    package kubernetes-validate==1.37.0 ships them (v1.37.0-local-strict): ConfigMap,
    NetworkPolicy and PodSpec with every definition they reach, nothing else;
  - agent-sandbox's CRDs at commit 2fd412d5 (k8s/crds/): the v1beta1 openAPIV3Schema of
    SandboxTemplate and SandboxWarmPool, as the API server would take them.

Usage: k8s-schemas.py KUBERNETES_VALIDATE_SCHEMA_DIR AGENT_SANDBOX_CRD_DIR OUT_DIR
  e.g. pip install kubernetes-validate==1.37.0 pyyaml; git -C agent-sandbox show 2fd412d5:k8s/crds/...
"""

import json
import os
import sys

import yaml

K8S_DIR, CRD_DIR, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
DEFS = json.load(open(os.path.join(K8S_DIR, "_definitions.json")))["$defs"]
ROOTS = {
    "ConfigMap": "io.k8s.api.core.v1.ConfigMap",
    "NetworkPolicy": "io.k8s.api.networking.v1.NetworkPolicy",
    "PodSpec": "io.k8s.api.core.v1.PodSpec",
    "ObjectMeta": "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
}
PREFIX = "#/$defs/"


def refs(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from refs(item)


def drop_descriptions(node):
    if isinstance(node, dict):
        return {k: drop_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [drop_descriptions(item) for item in node]
    return node


wanted, pending = set(), list(ROOTS.values())
while pending:
    name = pending.pop()
    if name in wanted:
        continue
    wanted.add(name)
    pending.extend(ref[len(PREFIX):] for ref in refs(DEFS[name]) if ref.startswith(PREFIX))

kubernetes = {
    "$comment": "Kubernetes 1.37 OpenAPI schemas, strict, from the PyPI package kubernetes-validate==1.37.0 (kubernetes_validate/kubernetes-json-schema/v1.37.0-local-strict), descriptions left out; made by scripts/k8s-schemas.py",
    "roots": {kind: f"#/$defs/{name}" for kind, name in ROOTS.items()},
    "$defs": {name: drop_descriptions(DEFS[name]) for name in sorted(wanted)},
}

crds = {}
for kind, file in (("SandboxTemplate", "extensions.agents.x-k8s.io_sandboxtemplates.yaml"), ("SandboxWarmPool", "extensions.agents.x-k8s.io_sandboxwarmpools.yaml")):
    crd = yaml.safe_load(open(os.path.join(CRD_DIR, file)))
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta1"]
    crds[kind] = drop_descriptions(version["schema"]["openAPIV3Schema"])
agent_sandbox = {
    "$comment": "agent-sandbox's CRDs (github.com/kubernetes-sigs/agent-sandbox, commit 2fd412d5, k8s/crds/), the v1beta1 openAPIV3Schema of each, descriptions left out; made by scripts/k8s-schemas.py",
    "kinds": crds,
}

os.makedirs(OUT, exist_ok=True)
for file, data in (("kubernetes-1.37-strict.json", kubernetes), ("agent-sandbox-2fd412d5-v1beta1.json", agent_sandbox)):
    with open(os.path.join(OUT, file), "w") as f:
        json.dump(data, f, separators=(",", ":"), sort_keys=True)
        f.write("\n")
    print(f"{file}: {os.path.getsize(os.path.join(OUT, file))} bytes")
