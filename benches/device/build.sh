#!/usr/bin/env bash
# Builds, on the dev machine, what `benches/device/vulkan.sh` and
# `benches/device/hip.sh` run on the lent GPU: release xtask (gen-model,
# bench), the rocmforge binary (`benches/device/never-hang.sh`) and the
# test binaries of the conformance suite and the GPU
# backends, stripped, into `.gpu/bin/` (ignored by git; carried with the
# run). The tree is over the 64 MiB transfer cap: `benches/device/trim.sh
# out` before a run, `trim.sh in` after.
#
# The lent GPU is NVIDIA's: its HIP kernels are the PTX, so the gfx code
# objects (half of each binary's size) are left out unless
# ROCMFORGE_GPU_TARGETS names them.
set -euo pipefail
cd "$(dirname "$0")/../.."
export ROCMFORGE_GPU_TARGETS=${ROCMFORGE_GPU_TARGETS:-sm_90}
mkdir -p .gpu/bin
rm -f .gpu/bin/*
cargo build --release -p xtask -p rocmforge
cp target/release/xtask .gpu/bin/xtask
cp target/release/rocmforge .gpu/bin/rocmforge
cargo test -p rocmforge-conformance -p rocmforge-vulkan -p rocmforge-hip -p hip-sys --no-run --message-format=json 2>/dev/null |
  python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        # The HIP crates have their own `allocations` and `timeout` tests.
        hip = "rocmforge-hip" in m["package_id"] or "hip-sys" in m["package_id"]
        print(("hip-" if hip else "") + m["target"]["name"], m["executable"])
' | while read -r name exe; do cp "$exe" ".gpu/bin/test-$name"; done
strip .gpu/bin/*
gzip -9 -f .gpu/bin/*
du -sh .gpu/bin
