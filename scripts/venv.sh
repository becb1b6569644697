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
pip_install() {
  # pip warns about every local mirror folder that lacks a package: keep only real messages.
  "$venv/bin/python" -m pip install -q -c "$root/scripts/constraints-cpu.txt" "$@" \
    2> >(grep -v "^WARNING: Location '" >&2)
}
if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ]; then
  echo "installing ascend_kv${extras:+[$extras]} into $venv ..." >&2
  pip_install -r "$root/scripts/constraints-cpu.txt"
  pip_install -e "$spec"
  # The operator library is compiled against this torch on first import (cached in ~/.cache/ascend_kv):
  # do it now, so the first command does not wait for it.
  "$venv/bin/python" -c "import ascend_kv"
  touch "$stamp"
fi
python="$venv/bin/python"
