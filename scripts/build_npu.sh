#!/usr/bin/env bash
# The whole NPU build, on an Ascend host with CANN and torch_npu: the AscendC kernels and the
# PyTorch op library libascend_kv_npu.so, copied to ascend_kv/lib/ (where the package looks for
# it; ASCEND_KV_NPU_LIB can point elsewhere). Then `ascend-kv info` shows what will run.
#
# Settings (environment): PYTHON (default: python3 on PATH, the one with torch_npu), JOBS (parallel
# compile jobs, default: the number of CPUs),
# SOC_VERSION (default: detected from NPU 0), BUILD_DIR (default: build/npu), ASCEND_HOME_PATH
# (default: found by sourcing CANN's set_env.sh from its usual install folders).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-python3}
build=${BUILD_DIR:-$root/build/npu}

if [ -z "${ASCEND_HOME_PATH:-}${ASCEND_TOOLKIT_HOME:-}" ]; then
  for env_script in /usr/local/Ascend/ascend-toolkit/set_env.sh /usr/local/Ascend/cann/set_env.sh \
                    "$HOME/Ascend/ascend-toolkit/set_env.sh"; do
    if [ -f "$env_script" ]; then
      echo "build_npu.sh: sourcing $env_script"
      set +u; . "$env_script"; set -u
      break
    fi
  done
fi
if [ -z "${ASCEND_HOME_PATH:-}${ASCEND_TOOLKIT_HOME:-}" ]; then
  echo "build_npu.sh: CANN not found: install it and source its set_env.sh (ASCEND_HOME_PATH unset)" >&2
  exit 1
fi

mkdir -p "$build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$(command -v "$python")" \
  ${SOC_VERSION:+-DSOC_VERSION="$SOC_VERSION"} | tee "$build/configure.log"
if ! grep -q "ascend_kv: building the NPU kernels" "$build/configure.log"; then
  echo "build_npu.sh: CMake skipped the NPU targets; the reason is in the lines starting 'ascend_kv:' above" >&2
  exit 1
fi
cmake --build "$build" --target ascend_kv_npu -j "${JOBS:-$(nproc)}"
install -D -m 755 "$build/lib/libascend_kv_npu.so" "$root/ascend_kv/lib/libascend_kv_npu.so"
echo "build_npu.sh: installed $root/ascend_kv/lib/libascend_kv_npu.so"
"$python" -m ascend_kv info
