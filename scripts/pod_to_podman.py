"""The pod of `airlock k8s render --json` as a `podman run`: what the kubelet would give the pod,
spelt in podman's options, so that scripts/test-oci.sh runs airlock's image exactly as the
rendered SandboxTemplate asks. A field of the pod this does not know stops it: a change to the
render cannot slip past the test.

Usage: pod_to_podman.py RENDERED_JSON WORKDIR IMAGE HOST_UID_BASE PORT_MAP_JSON SECRET_FILES_JSON
  Prints the podman options and the container's arguments as a JSON list (IMAGE in its place).
  Volumes are made under WORKDIR as the kubelet makes them: a ConfigMap's and a Secret's files
  behind the ..data link, owned by the pod's root with the pod's fsGroup, in defaultMode; an
  emptyDir mode 0777. HOST_UID_BASE is where the pod's user namespace starts on the host.
"""

import json
import os
import sys

rendered, workdir, image = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
base = int(sys.argv[4])
port_map = {int(k): int(v) for k, v in json.loads(sys.argv[5]).items()}
secret_files = json.loads(sys.argv[6])


def only(obj, known, where):
    unknown = set(obj) - set(known)
    if unknown:
        raise SystemExit(f"pod_to_podman: {where}: fields this does not translate: {sorted(unknown)}")


template = next(o for o in rendered if o["kind"] == "SandboxTemplate")
config_maps = {o["metadata"]["name"]: o for o in rendered if o["kind"] == "ConfigMap"}
pod = template["spec"]["podTemplate"]["spec"]
only(pod, ["hostUsers", "automountServiceAccountToken", "enableServiceLinks", "securityContext", "containers", "volumes"], "pod")
options = []

# hostUsers: false is a user namespace of the pod's own: 65536 ids from `base` on the host.
if pod.get("hostUsers") is not False:
    raise SystemExit("pod_to_podman: the pod must ask for hostUsers: false")
options += ["--uidmap", f"0:{base}:65536", "--gidmap", f"0:{base}:65536"]

pod_security = pod["securityContext"]
only(pod_security, ["runAsNonRoot", "runAsUser", "runAsGroup", "fsGroup", "seccompProfile"], "pod securityContext")
uid, gid, fs_group = pod_security["runAsUser"], pod_security["runAsGroup"], pod_security["fsGroup"]
if pod_security.get("runAsNonRoot") and uid == 0:
    raise SystemExit("pod_to_podman: runAsNonRoot with runAsUser 0")
options += ["--user", f"{uid}:{gid}", "--group-add", str(fs_group)]
seccomp = pod_security["seccompProfile"]["type"]
options += {"Unconfined": ["--security-opt", "seccomp=unconfined"], "RuntimeDefault": []}[seccomp]

(container,) = pod["containers"]
only(container, ["name", "image", "args", "env", "ports", "readinessProbe", "resources", "securityContext", "volumeMounts"], "container")
security = container["securityContext"]
only(security, ["allowPrivilegeEscalation", "capabilities", "procMount", "readOnlyRootFilesystem", "appArmorProfile"], "container securityContext")
if security["allowPrivilegeEscalation"] is False:
    options += ["--security-opt", "no-new-privileges"]
for cap in security["capabilities"].get("drop", []):
    options += ["--cap-drop", cap]
if security["capabilities"].get("add"):
    raise SystemExit("pod_to_podman: capabilities added")
if security.get("procMount") == "Unmasked":
    options += ["--security-opt", "unmask=ALL"]
if security.get("readOnlyRootFilesystem"):
    # The kubelet adds no writable /tmp; podman would.
    options += ["--read-only", "--read-only-tmpfs=false"]
# appArmorProfile: these machines run no AppArmor; podman has nothing to unconfine, but nothing
# else than Unconfined is expected.
if security.get("appArmorProfile") != {"type": "Unconfined"}:
    raise SystemExit(f"pod_to_podman: appArmorProfile {security.get('appArmorProfile')}")

only(container["resources"], ["limits", "requests"], "resources")
only(container["resources"]["limits"], ["memory", "cpu"], "resources.limits")
only(container["readinessProbe"], ["httpGet"], "readinessProbe")
only(container["readinessProbe"]["httpGet"], ["path", "port"], "readinessProbe.httpGet")
limits = container["resources"]["limits"]
options += ["--memory", limits["memory"].replace("Mi", "m")]
if "cpu" in limits:
    options += ["--cpus", str(int(limits["cpu"].rstrip("m")) / 1000)]

# The downward API's fields as the kubelet fills them for this pod, and $(NAME) references to
# variables defined before, as the kubelet expands them.
POD_FIELDS = {"metadata.name": "airlock-oci-pod", "metadata.namespace": template["metadata"]["namespace"]}
defined = {}
for variable in container["env"]:
    only(variable, ["name", "value", "valueFrom"], f"env {variable['name']}")
    if "valueFrom" in variable:
        only(variable["valueFrom"], ["fieldRef"], f"env {variable['name']}.valueFrom")
        value = POD_FIELDS[variable["valueFrom"]["fieldRef"]["fieldPath"]]
    else:
        value = variable["value"]
        for name, known in defined.items():
            value = value.replace(f"$({name})", known)
    defined[variable["name"]] = value
    options += ["--env", f"{variable['name']}={value}"]
for port in container["ports"]:
    only(port, ["name", "containerPort", "protocol"], f"port {port.get('name')}")
    options += ["--publish", f"127.0.0.1:{port_map[port['containerPort']]}:{port['containerPort']}"]


def owned(path, mode, group=0):
    os.chown(path, base, base + group, follow_symlinks=False)
    if not os.path.islink(path):
        os.chmod(path, mode)


def projected(name, files, mode):
    """A ConfigMap's or Secret's volume as the kubelet writes it: a timestamped directory, ..data
    pointing at it, and each key a link through ..data."""
    root = os.path.join(workdir, name)
    data = os.path.join(root, "..2026_12_05_00_00_00.000000000")
    os.makedirs(data)
    for key, text in files.items():
        with open(os.path.join(data, key), "w") as f:
            f.write(text)
        owned(os.path.join(data, key), mode, fs_group)
        os.symlink(f"..data/{key}", os.path.join(root, key))
        owned(os.path.join(root, key), 0)
    os.symlink(os.path.basename(data), os.path.join(root, "..data"))
    owned(os.path.join(root, "..data"), 0)
    owned(data, 0o755, fs_group)
    # The kubelet leaves the volume's top world-writable with the sticky bit.
    owned(root, 0o1777, fs_group)
    return root


volumes = {}
for volume in pod["volumes"]:
    name = volume["name"]
    only(volume, ["name", "configMap", "secret", "emptyDir"], f"volume {name}")
    for kind, known in (("configMap", ["name"]), ("secret", ["secretName", "optional", "defaultMode"]), ("emptyDir", ["medium", "sizeLimit"])):
        if kind in volume:
            only(volume[kind], known, f"volume {name}.{kind}")
    if "configMap" in volume:
        source = config_maps[volume["configMap"]["name"]]
        volumes[name] = projected(name, source["data"], volume["configMap"].get("defaultMode", 0o644))
    elif "secret" in volume:
        volumes[name] = projected(name, secret_files, volume["secret"].get("defaultMode", 0o644))
    elif "emptyDir" in volume:
        path = os.path.join(workdir, name)
        os.makedirs(path)
        owned(path, 0o777, fs_group)
        volumes[name] = path
    else:
        raise SystemExit(f"pod_to_podman: volume {name}: a kind this does not translate")
for mount in container["volumeMounts"]:
    only(mount, ["name", "mountPath", "readOnly"], f"volumeMount {mount['name']}")
    suffix = ":ro" if mount.get("readOnly") else ""
    options += ["--volume", f"{volumes[mount['name']]}:{mount['mountPath']}{suffix}"]

print(json.dumps(options + [image] + container["args"]))
