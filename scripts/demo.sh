#!/usr/bin/env bash
# The package's main job: every operation in every mode on realistic shapes, checked against
# the reference, printing which backend ran and how long it took. Creates .venv if missing.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/venv.sh" ""
exec "$venv/bin/ascend-kv" demo "$@"
