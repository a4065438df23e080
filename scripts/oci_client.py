"""The real agent-sandbox client against airlock's image, run as the rendered pod (scripts/test-oci.sh).

Usage: oci_client.py RUNTIME_URL SANDBOXD_REST SANDBOXD_GRPC OPERATOR_TOKEN IN_CONTAINER_JSON
IN_CONTAINER_JSON is the argv that runs a command in the container beside airlock (podman exec):
what a process of the pod, outside airlock's sandbox, would see.
"""

import json
import subprocess
import sys

import requests

from k8s_agent_sandbox import SandboxdInClusterConnectionConfig
from k8s_agent_sandbox.exceptions import SandboxRequestError
from k8s_agent_sandbox.k8s_helper import K8sHelper
from k8s_agent_sandbox.models import SandboxDirectConnectionConfig
from k8s_agent_sandbox.sandbox import Sandbox

URL, REST, GRPC, OPERATOR = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
IN_CONTAINER = json.loads(sys.argv[5])


def check(condition, what):
    if not condition:
        raise SystemExit(f"FAILED: {what}")
    print(f"ok: {what}")


def beside(script):
    """A shell line in the container, outside airlock's sandbox: its status and output."""
    done = subprocess.run(IN_CONTAINER + ["sh", "-c", script], capture_output=True, text=True)
    return done.returncode, done.stdout


def operator(method, path, **kwargs):
    headers = {"X-Airlock-Token": OPERATOR, **kwargs.pop("headers", {})}
    return requests.request(method, f"{URL}{path}", headers=headers, timeout=60, **kwargs)


class NoCluster(K8sHelper):
    def __init__(self):
        self.injected_api_client = None

    def get_sandbox(self, name, namespace):
        return {}


class PodAtLoopback(K8sHelper):
    def __init__(self):
        self.injected_api_client = None

    def get_sandbox(self, name, namespace):
        return {"status": {"podIPs": [{"ip": "127.0.0.1"}]}}


legacy = Sandbox(claim_name="airlock", sandbox_id="airlock-oci", namespace="agents",
                 connection_config=SandboxDirectConnectionConfig(api_url=URL), k8s_helper=NoCluster())
sandboxd = Sandbox(claim_name="airlock", sandbox_id="airlock-oci-sandboxd", namespace="agents",
                   connection_config=SandboxdInClusterConnectionConfig(mode="in-cluster-pod-ip", rest_port=REST, grpc_port=GRPC),
                   k8s_helper=PodAtLoopback())

# A command runs in airlock's sandbox: its own user, host name and workspace.
ran = legacy.commands.run("id -un; hostname; pwd")
check(ran.exit_code == 0 and ran.stdout.split() == ["agent", "airlock", "/workspace"], f"a command runs in the sandbox ({ran.stdout!r})")

# The pod's own files: there for the pod's processes, not for a run.
status, out = beside("cat /etc/airlock/tokens/tokens.json; ls /var/lib/airlock/state")
check(status == 0 and OPERATOR.split("_")[1] in out, "the tokens Secret and the state directory are there in the pod")
ran = legacy.commands.run("cat /etc/airlock/tokens/tokens.json; ls /var/lib/airlock")
check(ran.exit_code != 0 and "hash" not in ran.stdout, f"a run sees neither ({ran.stdout!r} {ran.stderr.strip()[-80:]!r})")

# The pod's loopback (airlock's own port) answers beside airlock, not in a run.
probe = "exec 3<>/dev/tcp/127.0.0.1/8888 && echo connected"
status, out = beside(f"bash -c '{probe}'")
check(status == 0 and "connected" in out, "the pod's loopback answers outside the sandbox")
ran = legacy.commands.run(f"bash -c '{probe}'")
check(ran.exit_code != 0 and "connected" not in ran.stdout, "a run cannot reach it")

# The profile's hidden file: in the workspace, not in a run.
status, _ = beside("echo TOKEN=pod-secret > /workspace/.env")
check(status == 0, "a .env in the pod's workspace")
ran = sandboxd.commands.run("cat .env")
check("pod-secret" not in ran.stdout, f"sandboxd: the profile hides it from a run ({ran.stdout!r})")

# Uploads go into the session, not the workspace, until an operator applies them.
legacy.files.write("notes/todo.txt", "review me")
check(legacy.files.read("notes/todo.txt") == b"review me", "an upload reads back")
sandboxd.files.write("src/main.py", "print('hi')\n")
check(sandboxd.commands.run("cat src/main.py").stdout == "print('hi')\n", "sandboxd: a written file, seen by a command")
status, _ = beside("test -e /workspace/notes/todo.txt || test -e /workspace/src/main.py")
check(status != 0, "neither is in the workspace yet")

# airlock's own API through the router's way in: the token from the Secret in X-Airlock-Token.
check(requests.get(f"{URL}/v1/sessions", timeout=30).status_code == 401, "the API without a token: 401")
listed = operator("GET", "/v1/sessions")
check(listed.status_code == 200, f"the operator token from the Secret opens the API ({listed.status_code} {listed.text[:200]})")
pod_sessions = [s for s in listed.json()["sessions"] if s["lifecycle"] == "active"]
check(len(pod_sessions) == 1, f"one pod session ({pod_sessions})")
session = pod_sessions[0]["id"]
diff = operator("GET", f"/v1/sessions/{session}/diff", headers={"Accept": "text/x-diff"})
check(diff.status_code == 200 and "notes/todo.txt" in diff.text and "src/main.py" in diff.text, "its diff has both files")
for host, status in (("airlock-oci.agents.svc.cluster.local:8888", 200), ("airlock-oci.other.svc.cluster.local", 421), ("evil.example", 421)):
    answer = operator("GET", "/v1/sessions", headers={"Host": host})
    check(answer.status_code == status, f"Host {host}: {status}")

# The kill switch, through the API: both runtimes refuse with the reason.
check(operator("POST", "/v1/disable", json={"reason": "incident 44"}).status_code == 200, "the operator disables the profile")
try:
    legacy.commands.run("true")
    check(False, "a disabled profile refuses the command")
except SandboxRequestError as e:
    check(e.status_code == 403 and "incident 44" in e.response.text, "a disabled profile refuses the command, with its reason")
try:
    sandboxd.commands.run("true")
    check(False, "sandboxd: a disabled profile refuses the command")
except RuntimeError as e:
    check("incident 44" in str(e), "sandboxd: and over gRPC")
check(operator("POST", "/v1/enable").status_code == 200, "enabled again")

# Applied by the operator, the files are in the pod's workspace.
applied = operator("POST", f"/v1/sessions/{session}/apply", json={})
check(applied.status_code == 200, f"the operator applies the session ({applied.status_code} {applied.text[:200]})")
status, out = beside("cat /workspace/notes/todo.txt")
check(status == 0 and out == "review me", "the upload is in the workspace once applied")
legacy.close_connection()
sandboxd.close_connection()
print("oci client: all passed")
