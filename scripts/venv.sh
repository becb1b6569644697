# Sourced by the scripts: make .venv (once) and install the package into it.
# Usage: . scripts/venv.sh EXTRAS   (EXTRAS e.g. "" or "test")
# ASCEND_KV_TORCH=<version> (e.g. 2.10.0, the oldest torch the package supports) uses that torch
# instead, in its own venv .venv-torch<version>; PyPI has it as a CUDA build of several GB, which
# runs on the CPU.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
torch_version=${ASCEND_KV_TORCH:-}
venv=${ASCEND_KV_VENV:-$root/.venv${torch_version:+-torch$torch_version}}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
constraints="$root/scripts/constraints-cpu.txt"
if [ -n "$torch_version" ]; then
  constraints="$venv/constraints-torch.txt"
  echo "torch==$torch_version" > "$constraints"
fi
extras=${1:-}
spec="$root"
[ -n "$extras" ] && spec="$root[$extras]"
stamp="$venv/.ascend_kv-installed-$extras"
pip_install() {
  # Our constraints replace the machine's (a pip config may cap torch below the one asked for).
  # pip warns about every local mirror folder that lacks a package: keep only real messages.
  PIP_CONSTRAINT="$constraints" "$venv/bin/python" -m pip install -q "$@" \
    2> >(grep -v "^WARNING: Location '" >&2)
}
if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ]; then
  echo "installing ascend_kv${extras:+[$extras]} into $venv ..." >&2
  pip_install -r "$constraints"
  pip_install -e "$spec"
  # The operator library is compiled against this torch on first import (cached in ~/.cache/ascend_kv):
  # do it now, so the first command does not wait for it.
  "$venv/bin/python" -c "import ascend_kv"
  touch "$stamp"
fi
python="$venv/bin/python"
