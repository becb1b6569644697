#!/usr/bin/env bash
# Lint and type-check the package: ruff and mypy on ascend_kv/ and cpu_fallback/ (settings in
# pyproject.toml). Creates .venv if missing, installs the pinned tools into it once.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/venv.sh" ""
cd "$root"
tools="ruff==0.17.6 mypy==2.4.1"
stamp="$venv/.ascend_kv-lint-tools"
if [ "$(cat "$stamp" 2>/dev/null)" != "$tools" ]; then
  # shellcheck disable=SC2086
  pip_install $tools
  echo "$tools" > "$stamp"
fi
status=0
"$python" -m ruff check ascend_kv cpu_fallback tests scripts || status=1
"$python" -m mypy || status=1   # files = ascend_kv, cpu_fallback (pyproject.toml)
exit "$status"
