#!/usr/bin/env bash
# Run the whole test suite: creates .venv if missing, installs with the `test` extra, runs pytest.
# Extra arguments go to pytest (e.g. scripts/test.sh -k paged -x).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/venv.sh" test
cd "$root"
exec "$python" -m pytest "$@"
