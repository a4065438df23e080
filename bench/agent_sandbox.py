"""Requests of agent-sandbox's client (k8s-agent-sandbox) against airlock's runtimes and the peer's.

Run by bench/agent-sandbox.sh. Usage: agent_sandbox.py ROUNDS NAME=URL[,REST,GRPC] ...
Each target gets, round after round and in turn with the others (so that all see the same
stretches of the machine's speed), 20 of each operation: `commands.run("true")`, a 100-byte
`files.write`, its `files.read`; through the legacy runtime (a URL) and, where REST and gRPC
ports are given, through sandboxd. Prints each median (ms) and its ratio to the first target's.
"""

import statistics
import sys
import time

from k8s_agent_sandbox import SandboxdInClusterConnectionConfig
from k8s_agent_sandbox.k8s_helper import K8sHelper
from k8s_agent_sandbox.models import SandboxDirectConnectionConfig
from k8s_agent_sandbox.sandbox import Sandbox


class Direct(K8sHelper):
    def __init__(self):
        self.injected_api_client = None

    def get_sandbox(self, name, namespace):
        return {}


class Loopback(K8sHelper):
    def __init__(self):
        self.injected_api_client = None

    def get_sandbox(self, name, namespace):
        return {"status": {"podIPs": [{"ip": "127.0.0.1"}]}}


def sandboxes(spec):
    name, ports = spec.split("=", 1)
    parts = ports.split(",")
    made = {
        f"{name} legacy": Sandbox(
            claim_name="bench", sandbox_id="bench", namespace="default",
            connection_config=SandboxDirectConnectionConfig(api_url=parts[0]),
            k8s_helper=Direct(),
        )
    }
    if len(parts) == 3:
        made[f"{name} sandboxd"] = Sandbox(
            claim_name="bench", sandbox_id="bench-sbd", namespace="default",
            connection_config=SandboxdInClusterConnectionConfig(
                mode="in-cluster-pod-ip", rest_port=int(parts[1]), grpc_port=int(parts[2])
            ),
            k8s_helper=Loopback(),
        )
    return made


OPERATIONS = {
    "run true": lambda sb: sb.commands.run("true"),
    "write 100 B": lambda sb: sb.files.write("bench/file.txt", b"x" * 100),
    "read 100 B": lambda sb: sb.files.read("bench/file.txt"),
}


def main():
    rounds = int(sys.argv[1])
    targets = {}
    for spec in sys.argv[2:]:
        targets.update(sandboxes(spec))
    times = {(t, op): [] for t in targets for op in OPERATIONS}
    for sb in targets.values():  # warm: connections made, sessions found, files there
        for op in OPERATIONS.values():
            for _ in range(3):
                op(sb)
    for _ in range(rounds):
        for target, sb in targets.items():
            for op_name, op in OPERATIONS.items():
                for _ in range(20):
                    start = time.perf_counter()
                    op(sb)
                    times[(target, op_name)].append(time.perf_counter() - start)
    first = next(iter(targets))
    for op_name in OPERATIONS:
        base = statistics.median(times[(first, op_name)])
        for target in targets:
            median = statistics.median(times[(target, op_name)])
            print(f"{op_name:12s} {target:22s} {median * 1000:8.2f} ms  {median / base:6.2f}")


main()
