#!/usr/bin/env bash
# The model families (qwen3moe, Mixtral-style llama, phi3, gemma3, gpt-oss
# in Q8_0 and MXFP4, qwen2moe, mistral3) on the
# lent GPU: their conformance (prompt logits and greedy tokens against
# llama.cpp, every GPU backend against the CPU, the expert mat-vec of every
# weight type) on Vulkan and on HIP through the CUDA driver (logic and
# numerics, not AMD speed), then `xtask bench` of a real shape on both.
#
#   benches/device/families.sh conformance
#   benches/device/families.sh bench [TYPE] [PRESET]   # Q4_K qwen3-30b-a3b
#   (the families' reference logits must travel: KEEP_FIXTURES with their
#   stems for trim.sh, and only the test binaries this script runs)
#   benches/device/families.sh offload [TYPE] [PRESET] [N...]
#     --n-cpu-moe: test-expert_offload, then `xtask bench` of the preset
#     with the experts of the first N layers on the CPU (default 0 24 48)
#   benches/device/families.sh all
set -uo pipefail
mode=${1:-all}
ty=${2:-Q4_K}
preset=${3:-qwen3-30b-a3b}
. "$(dirname "$0")/prelude.sh"

export ROCMFORGE_HIP_RUNTIME=cuda
export ROCMFORGE_REQUIRE_BACKENDS=cpu,vulkan,rocm

if [ "$mode" = conformance ] || [ "$mode" = all ]; then
  for t in .gpu/bin/test-families ".gpu/bin/test-weight_types mixtral"; do
    echo "== $t"
    # shellcheck disable=SC2086 # the test filter travels in $t.
    $t --test-threads=1 --nocapture 2>&1 | tee -a "$out/families-conformance.log" |
      grep -E "^test |test result|vs cpu|vs llama|agree|panicked"
  done
fi

if [ "$mode" = bench ] || [ "$mode" = all ]; then
  m="$CARGO_TARGET_DIR/models/$preset-$ty.gguf"
  [ -f "$m" ] || /usr/bin/time -f "gen-model %e s" .gpu/bin/xtask gen-model \
    --preset "$preset" --type "$ty" --out "$m" 2>&1 | tail -2
  for backend in vulkan rocm; do
    .gpu/bin/xtask bench --backend "$backend" --model "$m" -p 512 -n 128 -r 3 -o md 2>&1 |
      tee -a "$out/families-bench.md"
  done
fi

if [ "$mode" = offload ]; then
  echo "== test-expert_offload"
  .gpu/bin/test-expert_offload --test-threads=1 --nocapture 2>&1 |
    tee -a "$out/offload-conformance.log" | grep -E "^test |test result|vs cpu|panicked"
  shift $(($# < 3 ? $# : 3))
  layers=${*:-0 24 48}
  m="$CARGO_TARGET_DIR/models/$preset-$ty.gguf"
  [ -f "$m" ] || /usr/bin/time -f "gen-model %e s" .gpu/bin/xtask gen-model \
    --preset "$preset" --type "$ty" --out "$m" 2>&1 | tail -2
  for backend in vulkan rocm; do
    for n in $layers; do
      echo "== $backend --n-cpu-moe $n"
      .gpu/bin/xtask bench --backend "$backend" --model "$m" -p 512 -n 64 -r 2 \
        --n-cpu-moe "$n" -o md 2>&1 | tee -a "$out/offload-bench.md"
    done
  done
fi
