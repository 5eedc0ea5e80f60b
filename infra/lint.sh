#!/usr/bin/env bash
# The lint gate, the one definition of it: `make lint` and .ci/run both run this file.
# The rules themselves (and why each exception exists) live in pyproject.toml.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin=.venv/bin

"${bin}/ruff" check .
"${bin}/ruff" format --check .
# One run: the services and the tests are checked against the same view of the code.
"${bin}/mypy" schemas projections services infra bench tests client/gridledger_client
