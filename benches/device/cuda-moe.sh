#!/usr/bin/env bash
# Issue 23's HIP and CPU lines in one lease: llama.cpp's CUDA build made on
# the device from the sdist's source (`.llsrc/llama-src.tar.gz`: the
# llama-cpp-python sdist's vendor/llama.cpp without its docs, models,
# tests and other backends, made on the dev machine), then
# - ours through the HIP backend on the CUDA driver (`--backend rocm`,
#   ROCMFORGE_HIP_RUNTIME=cuda) against llama.cpp CUDA, pp512 and tg128;
# - the CPU line: ours `--backend cpu -t 2` against llama.cpp's CPU backend
#   (the same build with no GPU visible), both pinned to cores 0 and 1,
#   on Qwen3-30B-A3B Q4_0 generated in this lease (so page-cached).
#   CUDA_MOE_CPU_TESTS (-p 64 -n 16) the CPU tests; CUDA_MOE_BINS (xtask)
#   the builds of ours in .gpu/bin/ that the HIP rows run, each in turn
#   (an A/B of a kernel change: "xtask xtask-base").
# The build runs while the models are generated; nothing is timed until
# both are done. Results in $OUT/cuda-moe.md.
set -uo pipefail
. "$(dirname "$0")/prelude.sh"
models="qwen3-30b-a3b:Q4_0 gpt-oss-20b:MXFP4"
cpu_tests=${CUDA_MOE_CPU_TESTS:--p 64 -n 16}
bins=${CUDA_MOE_BINS:-xtask}
src=/tmp/llama-cuda
mkdir -p "$src"
tar xzf .llsrc/llama-src.tar.gz -C "$src"
(
  cd "$src" &&
    cmake -S . -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DBUILD_SHARED_LIBS=OFF \
      -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
      -DLLAMA_BUILD_APP=OFF -DCMAKE_BUILD_TYPE=Release >/tmp/llama-cmake.log 2>&1 &&
    cmake --build build --target llama-bench -j "$(nproc)" >/tmp/llama-build.log 2>&1
) &
build=$!
for m in $models; do
  f="$CARGO_TARGET_DIR/models/${m%%:*}-${m##*:}.gguf"
  [ -f "$f" ] || .gpu/bin/xtask gen-model --preset "${m%%:*}" --type "${m##*:}" --fast-kquants \
    --out "$f" 2>&1 | tail -1
done
start=$SECONDS
if ! wait "$build"; then
  tail -20 /tmp/llama-cmake.log /tmp/llama-build.log
  exit 1
fi
echo "llama.cpp CUDA build done $((SECONDS - start)) s after the models"
bench=$src/build/bin/llama-bench

llama() { # llama-bench's samples as "file test: mean median samples"
  "$@" -o jsonl 2>/dev/null | python3 -c '
import json, statistics, sys
for line in sys.stdin:
    j = json.loads(line)
    ts = j["samples_ts"]
    test = "pp%d" % j["n_prompt"] if j["n_gen"] == 0 else "tg%d" % j["n_gen"]
    print("%s %s: mean %.1f median %.1f samples %s" % (j["model_filename"].split("/")[-1], test,
          statistics.mean(ts), statistics.median(ts), " ".join("%.1f" % t for t in ts)))
'
}
ours() { # xtask bench's result rows
  "$@" -o md 2>&1 | grep -E "^\| [a-z].*\| (tg|pp)" | sed "s/|.*markers: [^|]*|/|/"
}

q3="$CARGO_TARGET_DIR/models/qwen3-30b-a3b-Q4_0.gguf"
echo "== CPU, 2 threads, cores 0-1: $cpu_tests" | tee -a "$out/cuda-moe.md"
for r in 1 2; do
  # shellcheck disable=SC2086 # the tests are words.
  ours taskset -c 0,1 .gpu/bin/xtask bench --backend cpu -t 2 --model "$q3" $cpu_tests -r 2 |
    sed "s/^/$r ours cpu /" | tee -a "$out/cuda-moe.md"
  # shellcheck disable=SC2086
  CUDA_VISIBLE_DEVICES= llama taskset -c 0,1 "$bench" -m "$q3" -t 2 $cpu_tests -r 2 |
    sed "s/^/$r llama.cpp cpu /" | tee -a "$out/cuda-moe.md"
done

echo "== HIP via the CUDA driver against llama.cpp CUDA" | tee -a "$out/cuda-moe.md"
for r in 1 2; do
  for m in $models; do
    f="$CARGO_TARGET_DIR/models/${m%%:*}-${m##*:}.gguf"
    for bin in $bins; do
      ROCMFORGE_HIP_RUNTIME=cuda ours ".gpu/bin/$bin" bench --backend rocm --model "$f" -p 512 -n 128 -r 2 |
        sed "s/^/$r ours($bin) rocm /" | tee -a "$out/cuda-moe.md"
    done
    llama "$bench" -m "$f" -p 512 -n 128 -r 3 | sed "s/^/$r llama.cpp cuda /" | tee -a "$out/cuda-moe.md"
  done
done
echo "cuda-moe.sh: $SECONDS s in all" | tee -a "$out/cuda-moe.md"
