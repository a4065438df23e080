#!/usr/bin/env bash
# airlock's OCI image (packaging/oci/Containerfile, scripts/build-oci.sh) run as the pod that
# `airlock k8s render` describes, under podman: scripts/pod_to_podman.py turns the rendered
# SandboxTemplate's pod into podman's options (a user namespace for hostUsers: false, the user and
# fsGroup, no capabilities, no-new-privileges, an unmasked /proc, a read-only root, seccomp as the
# pod says, the ConfigMap, the tokens Secret and the emptyDirs as the kubelet lays them out), and
# refuses a field it does not know. Then:
#   - `airlock check` in the container says full protection;
#   - the real agent-sandbox client (k8s-agent-sandbox, as scripts/test-agent-sandbox.sh pins it)
#     runs commands and file operations over both runtimes, each confined: scripts/oci_client.py
#     says what is checked (the container's own files and loopback reachable outside a run, not
#     inside; uploads in the session, not the workspace, until an operator applies them through
#     the API with the token from the Secret; the kill switch; the Host names the router uses).
# Run as root (rootful podman); ~1 minute once the image's base and the client are cached.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "scripts/test-oci.sh: run as root (podman, rootful)" >&2; exit 1; }
cache=${AIRLOCK_CI_CACHE:-$HOME/.cache/airlock-ci}
python=${PYTHON:-python3}
say() { echo "test-oci: $*" >&2; }

if ! command -v podman >/dev/null; then
  say "installing podman (apt)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends podman runc uidmap >/dev/null
fi
# shellcheck source=scripts/lib/clients.sh
. scripts/lib/clients.sh
# shellcheck source=scripts/lib/bookworm-root.sh
. scripts/lib/bookworm-root.sh
venv="$cache/agent-sandbox-client"
pinned_venv "$venv" k8s_agent_sandbox "k8s-agent-sandbox[grpc]==1.0.8"
airlock_binary
base_root=$(bookworm_root)

work=$(mktemp -d "${TMPDIR:-/tmp}/airlock-test-oci.XXXXXX")
chmod 755 "$work"
name=airlock-test-oci-$$
base_image=localhost/$name-base:latest
image=localhost/$name:latest
podman_global=(--runtime runc --cgroup-manager cgroupfs)
podman=(podman "${podman_global[@]}")
cleanup() {
  "${podman[@]}" rm -f "$name" >/dev/null 2>&1 || true
  "${podman[@]}" rmi -f "$image" "$base_image" >/dev/null 2>&1 || true
  if [ -n "${TEST_OCI_KEEP:-}" ]; then echo "test-oci: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

# The image, from the cached bookworm root (no registry here) as its base.
tar -C "$base_root" -c . | "${podman[@]}" import - "$base_image" >"$work/import.log" 2>&1 ||
  { cat "$work/import.log" >&2; exit 1; }
PODMAN_OPTIONS="${podman_global[*]}" AIRLOCK_OCI_BASE=$base_image AIRLOCK_BINARY=$airlock \
  scripts/build-oci.sh "$image" >/dev/null
say "built $image"

# By default the image says what the container allows and ends: it serves nothing without the
# pod's arguments (the runtime's ports take no token).
status=0
timeout 60 "${podman[@]}" run --rm --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 "$image" >"$work/default.out" 2>&1 || status=$?
if grep -q '^protection:' "$work/default.out" && [ "$status" != 124 ]; then
  echo "ok: the image's default command is 'airlock check' (exit $status), not a server"
else
  sed 's/^/    /' "$work/default.out" >&2
  echo "FAILED: the image's default command (exit $status)" >&2
  exit 1
fi
"${podman[@]}" run --rm --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 --entrypoint sh "$image" \
  -c 'id -u; find / -xdev -type f -perm /6000 2>/dev/null; true' >"$work/image.out" 2>&1 || true
if [ "$(cat "$work/image.out")" = 1000 ]; then
  echo "ok: the image runs as uid 1000 and has no setuid or setgid program"
else
  sed 's/^/    /' "$work/image.out" >&2
  echo "FAILED: the image's user or its setuid programs" >&2
  exit 1
fi

# The pod's profile (the workspace's .env hidden; no network) and an operator token for the
# Secret, made where the platform engineer would make them.
mkdir -p "$work/config/airlock/profiles" "$work/tokens-state"
printf '[filesystem]\nhide = ["/workspace/.env"]\n[limits]\nmemory = "512MiB"\n' \
  >"$work/config/airlock/profiles/pod.toml"
export XDG_CONFIG_HOME=$work/config
operator=$("$airlock" --state-dir "$work/tokens-state" token create --role operator --profile pod --name k8s | tail -1)
"$airlock" --state-dir "$work/tokens-state" k8s render pod \
  --image "$image" --namespace agents --router-namespace agent-sandbox-system --json >"$work/rendered.json"

free_port() {
  "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
runtime=$(free_port) rest=$(free_port) grpc=$(free_port)
mkdir -p "$work/volumes"
mapfile -t run_args < <("$python" scripts/pod_to_podman.py "$work/rendered.json" "$work/volumes" "$image" 300000 \
  "{\"8888\": $runtime, \"8080\": $rest, \"9090\": $grpc}" \
  "$("$python" -c 'import json,sys; print(json.dumps({"tokens.json": open(sys.argv[1]).read()}))' "$work/tokens-state/tokens.json")" |
  "$python" -c 'import json,sys; print("\n".join(json.load(sys.stdin)))')
say "podman run ${run_args[*]}"
"${podman[@]}" run -d --name "$name" --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 "${run_args[@]}" >/dev/null
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$runtime/v1/health" >/dev/null 2>&1 && break
  sleep 0.2
done
if ! curl -sf "http://127.0.0.1:$runtime/v1/health" >/dev/null; then
  "${podman[@]}" logs "$name" >&2 || true
  echo "FAILED: airlock in the pod did not become ready" >&2
  exit 1
fi
echo "ok: the pod's readiness probe (GET /v1/health) answers"

# Every layer airlock builds is there; the cgroups are not airlock's in a pod (Kubernetes
# delegates none to a container), so check says partial (exit 4) and names only them.
status=0
"${podman[@]}" exec "$name" airlock check >"$work/check.out" 2>&1 || status=$?
layers_not_ok=$(awk '$1 == "partial" || $1 == "MISSING" {print $2}' "$work/check.out" | sort -u | tr '\n' ' ')
if [ "$status" = 4 ] && [ "$layers_not_ok" = "cgroups " ] && grep -q '^protection: partial' "$work/check.out" &&
  grep -q 'airlock nests here' "$work/check.out"; then
  echo "ok: airlock check in the pod: every layer but cgroups (the pod's own limits stand in), exit 4"
else
  sed 's/^/    /' "$work/check.out" >&2
  echo "FAILED: airlock check in the pod (exit $status; not ok: $layers_not_ok)" >&2
  exit 1
fi

"$venv/bin/python" scripts/oci_client.py "http://127.0.0.1:$runtime" "$rest" "$grpc" "$operator" \
  "$(printf '%s\n' "${podman[@]}" exec "$name" | "$python" -c 'import json,sys; print(json.dumps(sys.stdin.read().split()))')"
# The pod's audit log leaves it on stdout, where the cluster's log collector reads it: every
# record, its chain verifiable from the copy alone.
sleep 1
"${podman[@]}" logs "$name" >"$work/pod.log" 2>&1
records=$(grep -c '^{.*"seq":' "$work/pod.log" || true)
if "$airlock" log verify --from "$work/pod.log" >"$work/verify.out" 2>&1 && [ "$records" -gt 20 ]; then
  echo "ok: the pod's stdout carries its audit log ($records records), and the copy verifies"
else
  sed 's/^/    /' "$work/verify.out" >&2
  echo "FAILED: the pod's audit records on stdout ($records)" >&2
  exit 1
fi
"${podman[@]}" logs "$name" 2>&1 | grep -q 'no TLS beyond loopback (--allow-clear-text)' ||
  { echo "FAILED: the server did not warn of clear text" >&2; exit 1; }
echo "ok: the server warns that the pod's network carries tokens in clear text"
echo "test-oci: all passed"
