#!/usr/bin/env bash
# Issue 9 on the lent GPU: what `--backend auto` picks and says, `doctor`,
# injected faults on a real GPU, and the `doctor --probe` kernel sweep.
# Runs from the repository root on the device machine with the binaries of
# `benches/device/build.sh` in `.gpu/` and the Vulkan loader's packages in
# `.gl/`.
#
#   benches/device/never-hang.sh auto           # auto, doctor, faults
#   benches/device/never-hang.sh probe-vulkan   # doctor --probe on vulkan
#   benches/device/never-hang.sh probe-rocm     # ... on rocm via the CUDA driver
set -uo pipefail
mode=${1:-auto}
. "$(dirname "$0")/prelude.sh"

rf=.gpu/bin/rocmforge
m=$CARGO_TARGET_DIR/models/tiny-llama-Q4_K.gguf
[ -f "$m" ] || .gpu/bin/xtask gen-model --preset tiny-llama --type Q4_K --out "$m" 2>&1 | tail -1
gen() { "$rf" generate --gguf "$m" --prompt "Once upon a time" -n 16 --temp 0 "$@"; echo "exit $?"; }

if [ "$mode" = auto ]; then
  {
    echo "== doctor"
    "$rf" doctor
    echo "== auto, first run (probes rocm and vulkan in child processes)"
    export ROCMFORGE_CACHE_DIR=/tmp/rf-cache
    rm -rf "$ROCMFORGE_CACHE_DIR"
    time gen
    echo "== auto, second run (cached verdicts)"
    time gen
    echo "== auto with ROCMFORGE_HIP_RUNTIME=cuda (rocm probed through the CUDA driver)"
    ROCMFORGE_CACHE_DIR=/tmp/rf-cache-cuda ROCMFORGE_HIP_RUNTIME=cuda gen
    echo "== auto, vulkan made to hang in load (injected), probe timeout 10 s"
    time ROCMFORGE_CACHE_DIR=/tmp/rf-cache-hang ROCMFORGE_INJECT_FAULT=vulkan:hang@load gen --probe-timeout 10
    echo "== vulkan: a context too large for the GPU"
    gen --backend vulkan --ctx-size 4000000000
    echo "== vulkan: device lost at step 5 (injected)"
    ROCMFORGE_INJECT_FAULT=vulkan:lost@step:5 gen --backend vulkan
    echo "== rocm via CUDA: a context too large for the GPU"
    ROCMFORGE_HIP_RUNTIME=cuda gen --backend rocm --ctx-size 4000000000
    echo "== cat the verdict cache"
    cat /tmp/rf-cache/backend-probes.json
  } 2>&1 | tee "$out/auto.log"
fi

if [ "$mode" = probe-vulkan ]; then
  time timeout 560 "$rf" doctor --probe --probe-backends vulkan "${@:2}" 2>&1 | tee "$out/probe-vulkan.md"
fi

if [ "$mode" = probe-rocm ]; then
  export ROCMFORGE_HIP_RUNTIME=cuda
  time timeout 560 "$rf" doctor --probe --probe-backends rocm "${@:2}" 2>&1 | tee "$out/probe-rocm.md"
fi
