#!/usr/bin/env bash
# Remove what the scripts and tests keep outside the sources: the virtual environments of this
# checkout (.venv, .venv-torch<version>) and the cache folder $ASCEND_KV_CACHE_DIR (default
# ~/.cache/ascend_kv: operator builds, the torch_npu headers, the torch_npu-without-CANN venv).
# Prints each folder with its size before removing it. `scripts/clean.sh --list` only prints.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${ASCEND_KV_CACHE_DIR:-$HOME/.cache/ascend_kv}
shopt -s nullglob
for folder in "$root"/.venv "$root"/.venv-torch* "$cache"; do
  [ -d "$folder" ] || continue
  du -sh "$folder"
  [ "${1:-}" = "--list" ] || rm -rf "$folder"
done
