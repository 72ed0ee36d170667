#!/usr/bin/env bash
# Issue 26's checks on the lent GPU, on Vulkan (NVIDIA's driver) and HIP
# through the CUDA driver (logic and numerics, not AMD speed): the
# single-op ragged shapes of every weight type against the CPU
# (test-op_shapes), the decode steps of tiny-qwen3moe-ragged in every
# expert type against llama.cpp (test-expert_types) and against the CPU
# (test-weight_types ragged), and the subgroup-size report
# (test-subgroup, `generate --list-devices`).
#
#   benches/device/shapes.sh        (after build.sh and trim.sh out)
set -uo pipefail
. "$(dirname "$0")/prelude.sh"

export ROCMFORGE_HIP_RUNTIME=cuda
export ROCMFORGE_REQUIRE_BACKENDS=cpu,vulkan,rocm

.gpu/bin/rocmforge generate --list-devices 2>&1 | tee -a "$out/shapes.log"
for t in .gpu/bin/test-subgroup .gpu/bin/test-op_shapes .gpu/bin/test-expert_types \
  ".gpu/bin/test-weight_types ragged"; do
  echo "== $t"
  # shellcheck disable=SC2086 # the test filter travels in $t.
  $t --test-threads=1 --nocapture 2>&1 | tee -a "$out/shapes.log" |
    grep -E "^test |test result|vs cpu|agree|panicked|conformance: |subgroup"
done
