#!/usr/bin/env bash
# The system libraries the optional extras load: libibverbs1, which Mooncake's transfer engine
# (ascend_kv[mooncake], in the test extra) links against even over TCP. Installs what is missing
# with apt-get (Debian/Ubuntu, non-interactive, as root or through sudo); does nothing when all is
# there, so CI may call it on every run.
set -euo pipefail
missing=()
for package in libibverbs1; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null; then
  echo "system_packages.sh: install ${missing[*]} with this system's package manager (no apt-get here)" >&2
  exit 1
fi
sudo=()
[ "$(id -u)" -ne 0 ] && sudo=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
