#!/usr/bin/env bash
# The HIP backend on the lent NVIDIA GPU, through the CUDA driver ("hip via
# CUDA driver": the kernels' sources compiled to PTX; this checks logic and
# numerics, not AMD speed). Runs from the repository root on the device
# machine with the binaries `benches/device/build.sh` put in `.gpu/`.
#
#   benches/device/hip.sh conformance   # kernels, backend tests, the suite
#   benches/device/hip.sh bench         # xtask bench --backend rocm
#   benches/device/hip.sh all
set -uo pipefail
mode=${1:-all}
. "$(dirname "$0")/prelude.sh"

export ROCMFORGE_HIP_RUNTIME=cuda
export ROCMFORGE_REQUIRE_BACKENDS=${ROCMFORGE_REQUIRE_BACKENDS:-cpu,rocm}
export ROCMFORGE_REQUIRE_HIP_DEVICE=1

if [ "$mode" = conformance ] || [ "$mode" = all ]; then
  [ -x .gpu/bin/test-hip-gpu ] && .gpu/bin/test-hip-gpu --ignored --test-threads=1 2>&1 |
    tee -a "$out/hip.log" | grep -E "^test |test result|panicked"
  for t in .gpu/bin/test-hip-* .gpu/bin/test-contract .gpu/bin/test-fixtures .gpu/bin/test-families .gpu/bin/test-weight_types; do
    case "$t" in .gpu/bin/test-hip-gpu|.gpu/bin/test-hip-device_kernels) continue ;; esac
    [ -x "$t" ] || continue
    echo "== $t"
    "$t" --test-threads=1 --nocapture 2>&1 | tee -a "$out/hip.log" |
      grep -E "^test |test result|FAIL|vs cpu|vs llama|panicked|device_kernels:|conformance: rocm"
  done
fi

if [ "$mode" = bench ] || [ "$mode" = all ]; then
  for preset in qwen2-0.5b llama2-7b; do
    m="$CARGO_TARGET_DIR/models/$preset-Q4_0.gguf"
    [ -f "$m" ] || .gpu/bin/xtask gen-model --preset "$preset" --type Q4_0 --out "$m" 2>&1 | tail -1
    .gpu/bin/xtask bench --backend rocm --model "$m" -p 512 -n 128 -r 3 -o md 2>&1 | tee -a "$out/bench.md"
  done
fi
