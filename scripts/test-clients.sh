#!/usr/bin/env bash
# The heavy tests with the real programs airlock's users run against it, each installed from its
# registry by its own script and cached outside the repository (${AIRLOCK_CI_CACHE:-~/.cache/airlock-ci}):
#   scripts/test-schemathesis.sh   the API's OpenAPI document, exercised by schemathesis (PyPI)
#   scripts/test-n8n.sh            a real n8n (npm) running the documented workflows through airlock serve
#   scripts/test-n8n-approval.sh   that n8n, running, taking approvals on a Webhook node and answering
#                                  them through airlock serve's API with an operator token
#   scripts/test-mcp.sh            the official MCP Python SDK (PyPI, 1.x and 2.x) driving airlock mcp
#   scripts/test-claude-code.sh    a real Claude Code (npm) whose Bash calls run in airlock, fail closed
#   scripts/test-codex.sh          a real Codex (npm) whose shell commands run in airlock, fail closed
#   scripts/test-learn.sh          pip, npm and cargo against their registries: refused at once, then learned
#   scripts/test-starters.sh       pip, npm, cargo and apt through their starter profiles, against
#                                  PyPI, the npm registry, crates.io and Debian's mirror
#   scripts/test-review.sh         the review page in Debian's chromium driven by Playwright (PyPI)
#   scripts/test-agent-sandbox.sh  agent-sandbox's Python client (PyPI) against airlock serve --agent-sandbox
#   scripts/test-k8s-render.sh     airlock k8s render's manifests against Kubernetes' and agent-sandbox's
#                                  schemas with jsonschema (PyPI)
#   scripts/test-otlp.sh           the audit log exported by airlock serve to an OTLP/HTTP receiver that
#                                  decodes it with opentelemetry-proto (PyPI), through an outage and a restart
# All use the release binary scripts/build.sh makes.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
status=0
for test in scripts/test-mcp.sh scripts/test-schemathesis.sh scripts/test-n8n.sh scripts/test-n8n-approval.sh scripts/test-claude-code.sh scripts/test-codex.sh scripts/test-learn.sh scripts/test-starters.sh scripts/test-review.sh scripts/test-agent-sandbox.sh scripts/test-k8s-render.sh scripts/test-otlp.sh; do
  echo "== $test"
  if ! "$test"; then
    echo "FAILED: $test" >&2
    status=1
  fi
done
exit $status
