#!/usr/bin/env bash
# Mixture-of-experts models on the lent GPU: the families' conformance
# (prompt logits and greedy tokens against llama.cpp, every GPU backend
# against the CPU, the expert mat-vec of every weight type) on Vulkan and
# on HIP through the CUDA driver (logic and numerics, not AMD speed), then
# `xtask bench` of the Qwen3-30B-A3B shape on both.
#
#   benches/device/moe.sh conformance
#   benches/device/moe.sh bench [TYPE]    # default Q4_K
#   benches/device/moe.sh all
set -uo pipefail
mode=${1:-all}
ty=${2:-Q4_K}
. "$(dirname "$0")/prelude.sh"

export ROCMFORGE_HIP_RUNTIME=cuda
export ROCMFORGE_REQUIRE_BACKENDS=cpu,vulkan,rocm

if [ "$mode" = conformance ] || [ "$mode" = all ]; then
  for t in .gpu/bin/test-families ".gpu/bin/test-weight_types mixtral"; do
    echo "== $t"
    # shellcheck disable=SC2086 # the test filter travels in $t.
    $t --test-threads=1 --nocapture 2>&1 | tee -a "$out/moe-conformance.log" |
      grep -E "^test |test result|vs cpu|vs llama|agree|panicked"
  done
fi

if [ "$mode" = bench ] || [ "$mode" = all ]; then
  m="$CARGO_TARGET_DIR/models/qwen3-30b-a3b-$ty.gguf"
  [ -f "$m" ] || /usr/bin/time -f "gen-model %e s" .gpu/bin/xtask gen-model \
    --preset qwen3-30b-a3b --type "$ty" --out "$m" 2>&1 | tail -2
  for backend in vulkan rocm; do
    .gpu/bin/xtask bench --backend "$backend" --model "$m" -p 512 -n 128 -r 3 -o md 2>&1 |
      tee -a "$out/moe-bench.md"
  done
fi
