#!/usr/bin/env bash
# The Vulkan backend on the lent GPU (docs/vulkan.md, "On the lent GPU").
# Runs from the repository root on the device machine, with binaries built
# on the dev machine by `benches/device/build.sh` and carried in `.gpu/`,
# and the Vulkan loader's Debian packages carried in `.gl/`.
#
#   benches/device/vulkan.sh conformance   # the suite, on the GPU
#   benches/device/vulkan.sh bench         # xtask bench vs the CPU rows
#   benches/device/vulkan.sh decode        # tg128 with the decode switches
#   benches/device/vulkan.sh all
set -uo pipefail
mode=${1:-all}
. "$(dirname "$0")/prelude.sh"

export ROCMFORGE_REQUIRE_BACKENDS=${ROCMFORGE_REQUIRE_BACKENDS:-cpu,vulkan}

if [ "$mode" = conformance ] || [ "$mode" = all ]; then
  for t in .gpu/bin/test-*; do
    case "$t" in *test-hip-*) continue ;; esac
    echo "== $t"
    "$t" --test-threads=1 --nocapture 2>&1 | tee -a "$out/conformance.log" | grep -E "^test |test result|vs cpu|vs llama|panicked"
  done
  # The 128x128 matrix-core matmul on the small test models too (by default
  # they take the 64x64 one).
  if [ -x .gpu/bin/test-vs_cpu ]; then
    echo "== .gpu/bin/test-vs_cpu tiny_llama long_prompt, ROCMFORGE_GPU_BIG_TILES=0"
    ROCMFORGE_GPU_BIG_TILES=0 .gpu/bin/test-vs_cpu --test-threads=1 tiny_llama long_prompt 2>&1 |
      tee -a "$out/conformance.log" | grep -E "^test |test result|panicked|σ"
  fi
fi

gen_models() {
  for preset in qwen2-0.5b llama2-7b; do
    [ -f "$CARGO_TARGET_DIR/models/$preset-Q4_0.gguf" ] && continue
    .gpu/bin/xtask gen-model --preset "$preset" --type Q4_0 \
      --out "$CARGO_TARGET_DIR/models/$preset-Q4_0.gguf" 2>&1 | tail -1
  done
}

if [ "$mode" = decode ]; then
  gen_models
  # Where decode time goes and what each switch does (measurement only;
  # SKIP_LAUNCHES gives wrong results): unfused recording (GPU_FUSE=0), no
  # dotPacked4x8 (VULKAN_INT_DOT=0), the f32 mat-vec (GPU_MATVEC_INT=0), the
  # mat-vecs or attention left out. LOG_LAUNCHES prints each graph's launch
  # count.
  for preset in qwen2-0.5b llama2-7b; do
    for v in GPU_LOG_LAUNCHES=1 GPU_FUSE=0+GPU_LOG_LAUNCHES=1 VULKAN_INT_DOT=0 GPU_MATVEC_INT=0 \
      GPU_SKIP_LAUNCHES=MatMul GPU_SKIP_LAUNCHES=Attention; do
      echo "== $preset tg128 with ROCMFORGE_$v"
      # shellcheck disable=SC2046 # A=1+B=2: several switches at once.
      env $(echo "ROCMFORGE_$v" | sed 's/+/ ROCMFORGE_/g') .gpu/bin/xtask bench --backend vulkan \
        --model "$CARGO_TARGET_DIR/models/$preset-Q4_0.gguf" -p 0 -n 128 -r 3 -o md 2>&1 |
        grep -E "tg128|records" | sort -u | sed 's/|.*matrix cores: [^|]*|/|/' | tee -a "$out/decode.md"
    done
  done
fi

if [ "$mode" = bench ] || [ "$mode" = all ]; then
  gen_models
  for preset in qwen2-0.5b llama2-7b; do
    .gpu/bin/xtask bench --backend vulkan,cpu --model "$CARGO_TARGET_DIR/models/$preset-Q4_0.gguf" \
      -p 512 -n 128 -r 3 -o md 2>&1 | tee -a "$out/bench.md"
  done
  # Where prefill time goes (measurement only, results wrong: see
  # ROCMFORGE_GPU_SKIP_LAUNCHES, core gpu::GpuOptions). The matrix-core tile
  # choice was measured with ROCMFORGE_GPU_BIG_TILES (0 = all 128x128,
  # huge = all 64x64) and COOPMAT_PREFETCH=0 / COOPMAT=0 (docs/vulkan.md).
  for preset in qwen2-0.5b llama2-7b; do
    for v in Attention MatMul; do
      echo "== $preset pp512 with ROCMFORGE_GPU_SKIP_LAUNCHES=$v"
      env "ROCMFORGE_GPU_SKIP_LAUNCHES=$v" .gpu/bin/xtask bench --backend vulkan \
        --model "$CARGO_TARGET_DIR/models/$preset-Q4_0.gguf" -p 512 -n 0 -r 3 -o md 2>&1 |
        grep "pp512" | sed 's/|.*matrix cores: [^|]*|/|/' | tee -a "$out/bench.md"
    done
  done
fi
