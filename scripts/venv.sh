# Sourced by the scripts: make .venv (once) and install the package into it.
# Usage: . scripts/venv.sh EXTRAS   (EXTRAS e.g. "" or "test")
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${ASCEND_KV_VENV:-$root/.venv}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
extras=${1:-}
spec="$root"
[ -n "$extras" ] && spec="$root[$extras]"
stamp="$venv/.ascend_kv-installed-$extras"
if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ]; then
  "$venv/bin/python" -m pip install -q -c "$root/scripts/constraints-cpu.txt" "torch==2.13.0"
  "$venv/bin/python" -m pip install -q -c "$root/scripts/constraints-cpu.txt" -e "$spec"
  touch "$stamp"
fi
python="$venv/bin/python"
