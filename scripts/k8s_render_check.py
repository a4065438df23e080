"""`airlock k8s render` checked against the schemas the cluster would check it with
(crates/airlock-k8s/schemas: Kubernetes 1.37's strict OpenAPI schemas and agent-sandbox's v1beta1
CRDs, made strict here), by a real validator (jsonschema); its YAML read back by a real YAML
parser (PyYAML) must be its JSON. Run by scripts/test-k8s-render.sh.

Usage: k8s_render_check.py AIRLOCK_ARGV_JSON SCHEMA_DIR
(the profiles it renders are in $XDG_CONFIG_HOME/airlock/profiles, written by the caller)
"""

import copy
import json
import os
import subprocess
import sys

import jsonschema
import yaml

AIRLOCK = json.loads(sys.argv[1])
SCHEMAS = sys.argv[2]
kubernetes = json.load(open(f"{SCHEMAS}/kubernetes-1.37-strict.json"))
agent_sandbox = json.load(open(f"{SCHEMAS}/agent-sandbox-2fd412d5-v1beta1.json"))


def check(condition, what):
    if not condition:
        raise SystemExit(f"FAILED: {what}")
    print(f"ok: {what}")


def k8s_validator(root):
    schema = {"$defs": kubernetes["$defs"], "$ref": kubernetes["roots"][root]}
    return jsonschema.Draft202012Validator(schema)


def strict(node):
    """A CRD's schema as the API server's pruning makes it behave: a field the schema does not
    name is not kept, which for a manifest written by a program means it was a mistake."""
    if isinstance(node, dict):
        node = {k: strict(v) for k, v in node.items()}
        if "properties" in node and "additionalProperties" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
            node["additionalProperties"] = False
        return node
    if isinstance(node, list):
        return [strict(item) for item in node]
    return node


VALIDATORS = {
    "ConfigMap": [k8s_validator("ConfigMap")],
    "NetworkPolicy": [k8s_validator("NetworkPolicy")],
    "SandboxTemplate": [jsonschema.Draft7Validator(strict(agent_sandbox["kinds"]["SandboxTemplate"]))],
    "SandboxWarmPool": [jsonschema.Draft7Validator(strict(agent_sandbox["kinds"]["SandboxWarmPool"]))],
}
POD_SPEC = k8s_validator("PodSpec")
OBJECT_META = k8s_validator("ObjectMeta")


def problems(obj):
    """Every schema error of one object: its kind's schema, its metadata as Kubernetes'
    ObjectMeta, and a template's pod as Kubernetes' own PodSpec (the CRD's copy is of an older
    k8s.io/api)."""
    found = []
    for validator in VALIDATORS[obj["kind"]]:
        found += [f"{obj['kind']}: {'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)]
    found += [f"metadata: {e.message}" for e in OBJECT_META.iter_errors(obj["metadata"])]
    if obj["kind"] == "SandboxTemplate":
        pod = obj["spec"]["podTemplate"]["spec"]
        found += [f"PodSpec: {'/'.join(map(str, e.absolute_path))}: {e.message}" for e in POD_SPEC.iter_errors(pod)]
    return found


def render(*args):
    out = subprocess.run(AIRLOCK + ["k8s", "render", *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"airlock k8s render {' '.join(args)} failed ({out.returncode}): {out.stderr}")
    return out.stdout, out.stderr


def consistent(objects, name):
    """What refers to what: the policy selects the template's pods, the pool names the
    template, the volumes the ConfigMap and the mounts the volumes."""
    by_kind = {o["kind"]: o for o in objects}
    config_maps = {o["metadata"]["name"] for o in objects if o["kind"] == "ConfigMap"}
    template = by_kind["SandboxTemplate"]
    pod = template["spec"]["podTemplate"]["spec"]
    selected = by_kind["NetworkPolicy"]["spec"]["podSelector"]["matchLabels"]
    labels = template["spec"]["podTemplate"]["metadata"]["labels"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"] for c in pod["containers"] for m in c["volumeMounts"]}
    check(all(labels.get(k) == v for k, v in selected.items()), f"{name}: the NetworkPolicy selects the template's pods")
    check(mounts <= set(volumes), f"{name}: every mount has its volume")
    check(
        {v["configMap"]["name"] for v in volumes.values() if "configMap" in v} == config_maps,
        f"{name}: the ConfigMap volumes are the ConfigMaps rendered",
    )
    if "SandboxWarmPool" in by_kind:
        check(by_kind["SandboxWarmPool"]["spec"]["sandboxTemplateRef"]["name"] == template["metadata"]["name"], f"{name}: the pool names the template")


CASES = {
    "the built-in default profile": ["default"],
    "names, addresses and denials": ["net", "--namespace", "agents", "--pool", "0"],
    "an open network, another router, direct clients": [
        "open", "--name", "open-pool", "--router-namespace", "agent-sandbox-system",
        "--router-label", "app=sandbox-router", "--allow-from-namespace", "agents-clients", "--pool", "5",
    ],
    "secrets from the credentials Secret, and an OTLP collector": [
        "creds", "--image", "registry.example:5000/team/airlock@sha256:" + "a" * 64,
        "--otlp-endpoint", "http://otel-collector.observability:4318",
    ],
    "a starter (npm)": ["npm", "--cluster-domain", "corp.internal"],
    "a profile a YAML reader might misread, and odd label values": [
        "nasty", "--router-namespace", "routers", "--router-label", "k=x\u0085y\u2028z", "--router-label", "yes=no",
        "--exclude-cidr", "34.118.224.0/20",
    ],
}
for case, args in CASES.items():
    as_json, notes = render(*args, "--json")
    objects = json.loads(as_json)
    as_yaml, _ = render(*args)
    check(list(yaml.safe_load_all(as_yaml)) == objects, f"{case}: the YAML reads back as the JSON")
    for obj in objects:
        found = problems(obj)
        check(not found, f"{case}: {obj['kind']} {obj['metadata']['name']} is valid" + ("" if not found else f": {found[:5]}"))
    consistent(objects, case)
    profile = objects[0]["data"]
    (key,) = profile
    source = f"{os.environ['XDG_CONFIG_HOME']}/airlock/profiles/{key}"
    if os.path.exists(source):
        with open(source, encoding="utf-8", newline="") as f:
            check(profile[key] == f.read(), f"{case}: the ConfigMap holds the profile's file byte for byte")
    if case.startswith("secrets"):
        check("comes from file /run/secrets/gh" in notes, f"{case}: a file secret is noted ({notes.strip()!r})")

# The validators can fail: a field misspelt, a type wrong, a value out of its enum.
objects = json.loads(render("default", "--json")[0])
template = next(o for o in objects if o["kind"] == "SandboxTemplate")
policy = next(o for o in objects if o["kind"] == "NetworkPolicy")
broken = {
    "a misspelt container securityContext field": lambda t: t["spec"]["podTemplate"]["spec"]["containers"][0]["securityContext"].update(procMout="Unmasked"),
    "a misspelt pod field": lambda t: t["spec"]["podTemplate"]["spec"].update(hostUser=False),
    "hostUsers as a string": lambda t: t["spec"]["podTemplate"]["spec"].update(hostUsers="false"),
    "a template field agent-sandbox does not have": lambda t: t["spec"].update(networkPolicyManagment="Unmanaged"),
    "networkPolicyManagement out of its enum": lambda t: t["spec"].update(networkPolicyManagement="Off"),
}
for what, change in broken.items():
    bad = copy.deepcopy(template)
    change(bad)
    check(problems(bad), f"refused: {what}")
bad = copy.deepcopy(policy)
bad["spec"]["ingress"][0]["ports"][0]["port"] = [8888]
check(problems(bad), "refused: a NetworkPolicy port that is a list")
bad = copy.deepcopy(policy)
bad["spec"]["podSelectr"] = {}
check(problems(bad), "refused: a misspelt NetworkPolicy field")
print("k8s render: all passed")
