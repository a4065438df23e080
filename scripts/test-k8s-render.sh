#!/usr/bin/env bash
# `airlock k8s render` validated as a cluster would validate it: scripts/k8s_render_check.py
# renders several profiles (the default, names with ports and addresses and denials, an open
# network with another router and direct clients, secrets, a starter) and checks each object
# with jsonschema against Kubernetes 1.37's strict OpenAPI schemas and agent-sandbox's v1beta1
# CRDs (crates/airlock-k8s/schemas, made by scripts/k8s-schemas.py; their sources there), its
# YAML read back by PyYAML as its JSON; and that the validators refuse misspelt fields and
# wrong values. jsonschema and PyYAML from PyPI, pinned, cached in
# ${AIRLOCK_CI_CACHE:-~/.cache/airlock-ci}. A few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${AIRLOCK_CI_CACHE:-$HOME/.cache/airlock-ci}
python=${PYTHON:-python3}
# shellcheck source=scripts/lib/clients.sh
. scripts/lib/clients.sh
venv="$cache/k8s-render-check"
pinned_venv "$venv" "jsonschema, yaml" "jsonschema==4.26.0" "PyYAML==6.0.3"
airlock_binary

work=$(mktemp -d /tmp/airlock-k8s-render-XXXXXX)
trap 'rm -rf "$work"' EXIT
profiles="$work/config/airlock/profiles"
mkdir -p "$profiles"
cat >"$profiles/net.toml" <<'TOML'
[network]
allow = ["github.com:443", "*.pypi.org:443", "10.1.2.3:5432", "192.168.0.0/16"]
deny = ["203.0.113.0/24", "evil.example"]
TOML
cat >"$profiles/open.toml" <<'TOML'
[network]
open = true
deny = ["198.51.100.7"]
TOML
cat >"$profiles/creds.toml" <<'TOML'
# Secrets: one from airlock's environment (wired from the Secret NAME-credentials), one from a file.
[network]
allow = ["api.github.com:443"]

[[secret]]
name = "GH_TOKEN"
from = { env = "GH_TOKEN" }
hosts = ["api.github.com"]
inject = { header = "Authorization", format = "Bearer {}" }

[[secret]]
name = "GH_OTHER"
from = { file = "/run/secrets/gh" }
hosts = ["api.github.com"]
inject = { header = "X-Token", format = "{}" }
TOML
# What a YAML reader might take for structure (found by review): a paragraph or line separator
# or NEL in a comment followed by what looks like a key, a first line that is blank and one
# indented, lines like document markers and keys (in a TOML string), trailing blanks, a tab.
"$python" - "$profiles/nasty.toml" <<'PY'
import sys
text = ("\n  [limits]\nmemory = \"1GiB\"\n# hidden:\u2029  README: |\n# x\u2028y\u0085z\n"
        "# trailing blanks   \n#\ttab\n[filesystem]\nhide = [\"/workspace/.env\"]\n"
        "[env.set]\nNOTE = \"\"\"\n---\n...\n  spaced\nkey: value\n\"\"\"\n")
open(sys.argv[1], "w", encoding="utf-8").write(text)
PY
XDG_CONFIG_HOME="$work/config" "$venv/bin/python" scripts/k8s_render_check.py \
  "$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "$airlock" --state-dir "$work/state")" \
  crates/airlock-k8s/schemas
