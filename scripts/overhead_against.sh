#!/usr/bin/env bash
# The host cost of a call (`ascend-kv bench --overhead`) of another revision against this tree, in
# one session: REV's tree (git archive) is installed editable into a throwaway venv that shares
# this tree's .venv packages (torch), then the same measuring module (this tree's
# ascend_kv/tools/overhead.py, self-contained: it needs only torch and an importable ascend_kv, and
# imports nothing else of either tree) runs for REV and for this tree alternately, PASSES times
# each, both on this tree's fake NPU (one build, the same device) and with the same do-nothing
# kernels (one build: a kernel table for a tree whose operators call one, the older torch.ops
# kernel library's NPU kernels replaced for a tree before the C++ operators); each run prints its
# table, and the end prints both side by side (fastest of each tree's runs) with new / old.
#
# Usage: scripts/overhead_against.sh REV [--passes N] [--out DIR] [overhead options, e.g. --tiny]
#   --passes N  runs per tree, alternating REV, this tree, REV, ... (default 2)
#   --out DIR   keep each run's JSON there (default: thrown away with the temporary tree)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ $# -lt 1 ] || [ "${1#-}" != "$1" ]; then
  echo "usage: scripts/overhead_against.sh REV [--passes N] [--out DIR] [ascend-kv bench --overhead options]" >&2
  exit 2
fi
rev=$1
shift
passes=2
out=
options=()
while [ $# -gt 0 ]; do
  case $1 in
    --passes) passes=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) options+=("$1"); shift ;;
  esac
done
commit=$(git -C "$root" rev-parse --short "$rev^{commit}")
. "$root/scripts/venv.sh" ""           # this tree's .venv, ascend_kv installed from this tree
new_python=$python
work=$(mktemp -d "${TMPDIR:-/tmp}/ascend_kv_against.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"                             # not a folder holding an ascend_kv of its own

echo "overhead_against: $commit into $work/tree, a venv sharing $venv's packages ..." >&2
mkdir "$work/tree" "$work/measure" "$work/json"
git -C "$root" archive "$commit" | tar -x -C "$work/tree"
"$new_python" -m venv --without-pip "$work/venv"
site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
"$new_python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))' > "$site/ascend_kv_shared_packages.pth"
"$new_python" -m pip --python "$work/venv/bin/python" install -q --no-deps --no-build-isolation -e "$work/tree" \
  2> >(grep -v "^WARNING: Location '\|outside environment\|No files were found to uninstall" >&2)
old_python=$work/venv/bin/python
"$old_python" -c 'import ascend_kv, sys; sys.exit(0 if ascend_kv.__file__.startswith(sys.argv[1]) else 1)' "$work/tree" \
  || { echo "overhead_against: the venv does not import $commit's tree" >&2; exit 1; }
# The same measuring code for both trees, under a name no tree has.
cp "$root/ascend_kv/tools/overhead.py" "$work/measure/ascend_kv_overhead.py"
measure="$work/measure/ascend_kv_overhead.py"
options+=(--fake-npu "$root/tests/fake_npu/__init__.py")

old_runs=() new_runs=()
for pass in $(seq 1 "$passes"); do
  echo "== $commit, run $pass of $passes"
  "$old_python" "$measure" --json "$work/json/old-$pass.json" "${options[@]}"
  old_runs+=("$work/json/old-$pass.json")
  echo "== this tree ($root), run $pass of $passes"
  "$new_python" "$measure" --json "$work/json/new-$pass.json" "${options[@]}"
  new_runs+=("$work/json/new-$pass.json")
done
echo "== $commit against this tree"
"$new_python" "$measure" --names "$commit,this tree" \
  --compare "$(IFS=,; echo "${old_runs[*]}")" "$(IFS=,; echo "${new_runs[*]}")"
if [ -n "$out" ]; then
  mkdir -p "$out"
  cp "$work"/json/*.json "$out"/
  echo "overhead_against: the runs' JSON are in $out" >&2
fi
