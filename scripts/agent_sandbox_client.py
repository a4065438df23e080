"""The real agent-sandbox client (k8s-agent-sandbox, PyPI) against `airlock serve --agent-sandbox`.

Run by scripts/test-agent-sandbox.sh, once as root and once with the server as an ordinary user.
Usage: agent_sandbox_client.py URL WORKSPACE OUTSIDE_PORT AIRLOCK_ARGV_JSON SANDBOXD_REST SANDBOXD_GRPC

The client's direct mode (SandboxDirectConnectionConfig: a URL, no cluster) speaks the legacy
in-pod runtime; its in-cluster sandboxd mode, given the pod's address by a helper, speaks sandboxd
(gRPC for commands, REST for files). `Sandbox` is built by hand with a Kubernetes helper that answers nothing, as
direct use without a cluster needs (SandboxClient always asks the Kubernetes API for a claim).
"""

import json
import os
import socket
import subprocess
import sys

import requests

from k8s_agent_sandbox import SandboxdInClusterConnectionConfig
from k8s_agent_sandbox.exceptions import SandboxRequestError
from k8s_agent_sandbox.k8s_helper import K8sHelper
from k8s_agent_sandbox.models import SandboxDirectConnectionConfig
from k8s_agent_sandbox.sandbox import Sandbox

URL, WORKSPACE, OUTSIDE_PORT = sys.argv[1], sys.argv[2], int(sys.argv[3])
AIRLOCK = json.loads(sys.argv[4])
SANDBOXD_REST, SANDBOXD_GRPC = int(sys.argv[5]), int(sys.argv[6])


class NoCluster(K8sHelper):
    """No Kubernetes API: no pod address to add to the requests."""

    def __init__(self):
        self.injected_api_client = None

    def get_sandbox(self, name, namespace):
        return {}


def airlock(*args):
    out = subprocess.run(AIRLOCK + list(args), capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"airlock {' '.join(args)} failed ({out.returncode}): {out.stderr}")
    return out.stdout


def check(condition, what):
    if not condition:
        raise SystemExit(f"FAILED: {what}")
    print(f"ok: {what}")


def refused(call, status, text):
    try:
        call()
    except SandboxRequestError as e:
        body = e.response.text if e.response is not None else ""
        return e.status_code == status and text in body
    return False


def pod_sessions():
    return [s for s in json.loads(airlock("sessions", "--json")) if (s.get("name") or "").startswith("pod-")]


sandbox = Sandbox(
    claim_name="airlock",
    sandbox_id="airlock-test",
    namespace="default",
    connection_config=SandboxDirectConnectionConfig(api_url=URL),
    k8s_helper=NoCluster(),
)

# A command runs, confined: the sandbox's name and user, in the workspace.
ran = sandbox.commands.run("hostname; id -un; pwd")
check(ran.exit_code == 0, f"a command runs ({ran})")
check(ran.stdout.split() == ["airlock", "agent", WORKSPACE], f"it runs as the sandbox's user in the workspace ({ran.stdout!r})")

# The host's files beyond the workspace are not there; the profile's hidden file is hidden.
with open(f"{WORKSPACE}/../outside-secret.txt") as f:
    check(f.read().strip() == "outside", "the file beside the workspace is readable outside")
ran = sandbox.commands.run("cat ../outside-secret.txt")
check(ran.exit_code != 0 and "outside" not in ran.stdout, "the file beside the workspace is not there inside")
ran = sandbox.commands.run("cat .env")
check("TOKEN=" not in ran.stdout, f"the profile's hidden .env reads as nothing ({ran.stdout!r})")
check(
    refused(lambda: sandbox.files.read(".env"), 404, "file_not_found"),
    "a download of the hidden .env is refused as absent",
)

# The network: this machine's port answers outside; the profile gives the sandbox none.
socket.create_connection(("127.0.0.1", OUTSIDE_PORT), timeout=2).close()
print("ok: the loopback port answers outside")
probe = f"import socket; socket.create_connection(('127.0.0.1', {OUTSIDE_PORT}), timeout=2)"
ran = sandbox.commands.run(f"python3 -c \"{probe}\"")
check(ran.exit_code != 0, f"inside, the port cannot be reached ({ran.stderr.strip()[-80:]!r})")

# A shell line, as sandboxd and the client's documentation run it.
ran = sandbox.commands.run("echo a | tr a b; exit 3")
check((ran.stdout, ran.exit_code) == ("b\n", 3), f"a shell line, its status ({ran})")

# The time limit the client asks for ends the command.
ran = sandbox.commands.run("sleep 10", command_timeout=1)
check(ran.timed_out and ran.exit_code == 124, f"command_timeout ends it ({ran})")

# An upload lands in the session's layer: readable through the sandbox, not in the workspace.
sandbox.files.write("data/in.txt", "payload")
check(sandbox.files.read("data/in.txt") == b"payload", "the upload reads back")
check(sandbox.commands.run("cat data/in.txt").stdout == "payload", "a command sees the upload")
check(not os.path.exists(f"{WORKSPACE}/data/in.txt"), "the workspace does not have it before it is applied")
entries = {e.name: e for e in sandbox.files.list("data")}
check(set(entries) == {"in.txt"} and entries["in.txt"].size == 7, f"list names it ({entries})")
top = {e.name: e.type for e in sandbox.files.list(".")}
check(top.get("data") == "directory" and top.get("readme.txt") == "file", f"the workspace's listing ({top})")
check(sandbox.files.exists("data/in.txt") and not sandbox.files.exists("nope"), "exists says which is there")
binary = bytes(range(256)) * 4
sandbox.files.write("bin/all.bytes", binary)
check(sandbox.files.read("bin/all.bytes") == binary, "binary content reads back whole")
check(refused(lambda: sandbox.files.read("nope"), 404, "file_not_found"), "a missing file is 404")
check(refused(lambda: sandbox.files.list("readme.txt"), 404, "not_a_directory"), "listing a file is 404")
check(
    refused(lambda: sandbox.files.read("../outside-secret.txt", allow_unsafe_paths=True), 403, "path_outside_workspace"),
    "a path out of the workspace is refused",
)
# Past the profile's output limit (64 KiB here), a download is refused, never cut short.
sandbox.files.write("big.bin", b"x" * 100_000)
check(refused(lambda: sandbox.files.read("big.bin"), 400, "file_too_large"), "a file past the output limit is refused whole")
check(sandbox.commands.run("wc -c < big.bin").stdout.strip() == "100000", "and is whole in the session")
ran = sandbox.commands.run("head -c 100000 /dev/zero | tr '\\0' x")
check(len(ran.stdout) < 100000 and "cut short" in ran.stderr, "output past the limit says it was cut")
# A link loop does not keep the rest of a directory from being listed.
sandbox.commands.run("mkdir -p loops && ln -s loop loops/loop && touch loops/plain")
check("plain" in {e.name for e in sandbox.files.list("loops")}, "a directory with a link loop is listed")

# No page of another site may read the runtime's files through a browser (no token guards them).
raw = requests.get(f"{URL}/download/readme.txt", timeout=30)
check(raw.status_code == 200 and raw.content == b"readme\n", "a plain client reads a file")
check(raw.headers.get("cross-origin-resource-policy") == "same-origin", "answers are for this origin only")
check(raw.headers.get("x-content-type-options") == "nosniff", "and never taken for a script")
for header in ({"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"}, {"Origin": "http://evil.test"}):
    answer = requests.get(f"{URL}/download/readme.txt", headers=header, timeout=30)
    check(answer.status_code == 403 and "origin_forbidden" in answer.text, f"a browser's request from another page is refused ({header})")
two = requests.post(f"{URL}/upload", files=[("file", ("a.txt", b"a")), ("file", ("b.txt", b"b"))], timeout=30)
check(two.status_code == 400 and "bad_upload" in two.text, "an upload of two files is refused")

# The session is the operator's to review: its diff names the upload, and the audit log has
# every request as a run.
sessions = pod_sessions()
check(len(sessions) == 1, f"one pod session ({[s['id'] for s in sessions]})")
session = sessions[0]["id"]
diff = airlock("diff", session, "--name-status")
check("data/in.txt" in diff and "bin/all.bytes" in diff and "a.txt" not in diff, f"the session's diff names the uploads ({diff.strip()!r})")
log = [json.loads(line) for line in airlock("log", "--session", session, "--json").splitlines() if line.strip()]
intents = [r["argv"] for r in log if r["action"] == "run.intent"]
check(["/bin/sh", "-c", "hostname; id -un; pwd"] in intents, "the audit log has the command's intent")
check(any("./data/in.txt" in argv for argv in intents), "and the upload's, as a run")
check(sum(r["action"] == "run.result" for r in log) == len(intents), "each with its result")

# The kill switch: a disabled profile refuses, with its reason, through the client.
airlock("disable", "--profile", "pod", "--reason", "incident 42")
check(
    refused(lambda: sandbox.commands.run("true"), 403, "incident 42"),
    "a disabled profile refuses the command with its reason",
)
check(refused(lambda: sandbox.files.read("data/in.txt"), 403, "incident 42"), "and the download")
airlock("enable", "--profile", "pod")
check(sandbox.commands.run("true").exit_code == 0, "enabled again, it runs")

# Applied by a person, the upload is in the workspace; the next request goes into a new session.
airlock("apply", session)
with open(f"{WORKSPACE}/data/in.txt") as f:
    check(f.read() == "payload", "once applied, the workspace has the upload")
sandbox.commands.run("echo later > later.txt")
after = [s["id"] for s in pod_sessions() if s["lifecycle"] == "active"]
check(len(after) == 1 and after[0] != session, f"the next command went into a new session ({after})")
check(not os.path.exists(f"{WORKSPACE}/later.txt"), "and waits there")
sandbox.close_connection()

# sandboxd, the runtime the client prefers in a cluster: commands over gRPC (process.v1
# ProcessService/Execute), files over its REST API. The client reaches it only by the pod's
# address, which a cluster would give: here the helper says 127.0.0.1.
class PodAtLoopback(K8sHelper):
    def __init__(self):
        self.injected_api_client = None

    def get_sandbox(self, name, namespace):
        return {"status": {"podIPs": [{"ip": "127.0.0.1"}]}}


pod = Sandbox(
    claim_name="airlock",
    sandbox_id="airlock-sandboxd",
    namespace="default",
    connection_config=SandboxdInClusterConnectionConfig(
        mode="in-cluster-pod-ip", rest_port=SANDBOXD_REST, grpc_port=SANDBOXD_GRPC
    ),
    k8s_helper=PodAtLoopback(),
)
ran = pod.commands.run("hostname; id -un; pwd; echo ${GREETING:-none} ${OTHER:-none}", env={"GREETING": "hi", "OTHER": "no"})
check(
    ran.stdout.split() == ["airlock", "agent", WORKSPACE, "hi", "none"],
    f"sandboxd: a command runs confined, with the variables the profile allows ({ran.stdout!r})",
)
ran = pod.commands.run("cat ../outside-secret.txt; cat .env")
check("outside" not in ran.stdout and "TOKEN=" not in ran.stdout, "sandboxd: nothing beyond the workspace, the hidden file hidden")
ran = pod.commands.run("sleep 10", command_timeout=1)
check(ran.timed_out and ran.exit_code == 124, f"sandboxd: the deadline ends the command ({ran})")
pod.files.write("deep/dir/f.txt", "sandboxd")
check(pod.files.read("deep/dir/f.txt") == b"sandboxd", "sandboxd: a written file reads back")
ran = pod.commands.run("pwd; cat f.txt", cwd="deep/dir")
check(ran.stdout.split() == [f"{WORKSPACE}/deep/dir", "sandboxd"], f"sandboxd: cwd within the workspace ({ran.stdout!r})")
try:
    pod.commands.run("pwd", cwd="../..")
    check(False, "sandboxd: a cwd out of the workspace is refused")
except RuntimeError as e:
    check("path_outside_workspace" in str(e), f"sandboxd: a cwd out of the workspace is refused ({e})")
listed = {e.name: (e.type, e.mode) for e in pod.files.list("deep/dir")}
check(listed == {"f.txt": ("file", "0644")}, f"sandboxd: the listing, with modes ({listed})")
check(pod.files.exists("deep/dir/f.txt") and not pod.files.exists("nope"), "sandboxd: HEAD says which is there")
check(not pod.files.exists(".env"), "sandboxd: the hidden .env is not there for HEAD either")
put = requests.put(f"http://127.0.0.1:{SANDBOXD_REST}/v1/files/deep/private.txt?mode=0600", data=b"p", timeout=30)
modes = {e.name: e.mode for e in pod.files.list("deep")}
check(put.status_code == 204 and modes.get("private.txt") == "0600", f"sandboxd: a PUT with a mode ({put.status_code}, {modes})")
bad = requests.put(f"http://127.0.0.1:{SANDBOXD_REST}/v1/files/deep/x.txt?mode=4755", data=b"p", timeout=30)
check(bad.status_code == 400, "sandboxd: a setuid mode is refused")
ran = pod.commands.run("head -c 100000 /dev/zero | tr '\\0' x")
check(len(ran.stdout) < 100000 and "cut short" in ran.stderr, f"sandboxd: output past the limit says it was cut ({len(ran.stdout)} bytes)")
meta = requests.get(f"http://127.0.0.1:{SANDBOXD_REST}/v1/metadata", timeout=30)
check(meta.json() == {"env": {}}, f"sandboxd: metadata tells nothing of the server's environment ({meta.text})")
try:
    pod.files.delete("deep")
    check(False, "sandboxd: a directory with files is not removed without recursive")
except SandboxRequestError as e:
    check(e.status_code == 409, "sandboxd: a directory with files is not removed without recursive")
pod.files.delete("later.txt")
check(not pod.files.exists("later.txt") and os.path.exists(f"{WORKSPACE}/later.txt") is False, "sandboxd: a file removed")
pod.files.delete("readme.txt")
check(os.path.exists(f"{WORKSPACE}/readme.txt"), "sandboxd: a workspace file removed in the session stays in the workspace")
active = [s["id"] for s in pod_sessions() if s["lifecycle"] == "active"]
diff = airlock("diff", active[0], "--name-status")
check("D\treadme.txt" in diff and "A\tdeep/dir/f.txt" in diff, f"sandboxd: its changes wait in the session ({diff.strip()!r})")
cross = requests.get(f"http://127.0.0.1:{SANDBOXD_REST}/v1/files/deep/dir/f.txt", headers={"Sec-Fetch-Site": "cross-site"}, timeout=30)
check(cross.status_code == 403, "sandboxd: another site's page may not read a file")
airlock("disable", "--profile", "pod", "--reason", "incident 43")
try:
    pod.commands.run("true")
    check(False, "sandboxd: a disabled profile refuses the command")
except RuntimeError as e:
    check("incident 43" in str(e), f"sandboxd: a disabled profile refuses the command with its reason ({e})")
check(refused(lambda: pod.files.read("deep/dir/f.txt"), 403, "incident 43"), "sandboxd: and the read")
airlock("enable", "--profile", "pod")
pod.close_connection()
print("agent-sandbox client: all passed")
