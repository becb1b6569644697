#!/usr/bin/env bash
# The "torch_npu installed, CANN missing" case (docs/hardware.md), checked for real.
#
# Builds (once, then cached) a separate venv with the newest torch_npu wheel (2.14.0) and the torch
# it pins (2.14.0, PyPI's CUDA build, about 4 GB: it runs on the CPU) but no CANN, installs this
# checkout into it (not editable: the real install layout), and checks that `import ascend_kv` and every `ascend-kv` command work there, fall back, and name the
# missing library. Without our guard, a plain `import torch` fails in such a venv.
#
# The venv lives in ${ASCEND_KV_NOCANN_VENV:-${ASCEND_KV_CACHE_DIR:-~/.cache/ascend_kv}/venv-npu-nocann}
# so that runs from fresh clones (CI) reuse it. Exit status 0 means every check passed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${ASCEND_KV_NOCANN_VENV:-${ASCEND_KV_CACHE_DIR:-$HOME/.cache/ascend_kv}/venv-npu-nocann}
torch_version=2.14.0

if [ ! -x "$venv/bin/python" ]; then
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv"
fi
stamp="$venv/.torch-$torch_version-torch_npu-$torch_version"
if [ ! -f "$stamp" ]; then
  : > "$venv/no-constraints.txt"  # not the CPU build's pin, nor a machine's cap on torch
  PIP_CONSTRAINT="$venv/no-constraints.txt" "$venv/bin/python" -m pip install -q \
    "torch==$torch_version" "torch_npu==$torch_version" \
    2> >(grep -v "^WARNING: Location '" >&2)  # pip's notes on local mirror folders lacking a package
  touch "$stamp"
fi
# This checkout, freshly: no dependencies to resolve (torch is there), no editable shortcut.
"$venv/bin/python" -m pip install -q --no-deps --force-reinstall "$root"

py="$venv/bin/python"
cli="$venv/bin/ascend-kv"
fail=0
check() {  # check DESCRIPTION COMMAND...: run it, show its output, count a failure
  local description=$1; shift
  local out
  if out=$(cd /tmp && env -u TORCH_DEVICE_BACKEND_AUTOLOAD "$@" 2>&1); then
    printf 'ok    %s\n' "$description"
  else
    printf 'FAIL  %s (exit %s)\n' "$description" "$?"
    fail=1
  fi
  printf '%s\n' "$out" | sed 's/^/      | /'
  LAST_OUTPUT=$out
}

check "the trap is real: plain 'import torch' fails here" \
  "$py" -c "
import sys
try:
    import torch
except Exception as error:
    print('import torch failed as expected:', str(error).splitlines()[0][:200])
    sys.exit(0)
print('import torch succeeded: this venv does not reproduce the trap')
sys.exit(1)
"
check "python -c 'import ascend_kv'" "$py" -c "import ascend_kv, torch; print('ascend_kv', ascend_kv.__version__, 'torch', torch.__version__)"
check "ascend-kv info names the missing library" "$cli" info
case $LAST_OUTPUT in
  *libhccl.so*|*libascendcl.so*|*libascend_hal.so*) ;;
  *) echo "FAIL  ascend-kv info does not name libhccl.so / libascendcl.so"; fail=1 ;;
esac
check "ascend-kv info --json" "$cli" info --json
check "ascend-kv support-matrix --soc Ascend910B3 --json" "$cli" support-matrix --soc Ascend910B3 --json
case $LAST_OUTPUT in
  *'"product_line": "atlas-a2"'*) ;;
  *) echo "FAIL  support-matrix did not answer atlas-a2"; fail=1 ;;
esac
check "python -m ascend_kv support-matrix" "$py" -m ascend_kv support-matrix
check "ascend-kv demo --quick" "$cli" demo --quick
exit $fail
