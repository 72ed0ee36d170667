#!/usr/bin/env bash
# MoE decode on the lent GPU's Vulkan driver against llama.cpp's Vulkan
# build (issue 23): qwen3-30b-a3b Q4_0 and gpt-oss-20b MXFP4 from
# `gen-model`, ours through `.gpu/bin/xtask` (benches/device/build.sh) and
# llama.cpp's `llama-bench` from `.llvk/` where it travelled (built on the
# dev machine from the llama-cpp-python sdist, statically linked).
#
#   benches/device/moe.sh profile          # the grid-keyed Vulkan profile of a decode
#   benches/device/moe.sh bench [VARS...]  # tg128 (and pp512) per variant, alternating
#     each VARS is A=1+B=2 (environment switches, % for a space in a value;
#     "-" for none; BIN=name runs .gpu/bin/name instead of xtask, and
#     BACKEND=rocm the HIP backend through the CUDA driver), then llama-bench
#   MOE_MODELS="qwen3-30b-a3b:Q4_0 gpt-oss-20b:MXFP4" (default) picks the files;
#   MOE_RUNS (2) repeats the variants' round and llama-bench's; MOE_TESTS
#   (-p 0 -n 128) the tests; MOE_LLAMA_REPS (3) llama-bench's repetitions,
#   each printed with their mean and median (its first is often slow).
set -uo pipefail
mode=${1:-bench}
shift || true
. "$(dirname "$0")/prelude.sh"
for f in .llvk/*.gz; do [ -e "$f" ] && gunzip -f "$f" && chmod +x "${f%.gz}"; done

models=${MOE_MODELS:-qwen3-30b-a3b:Q4_0 gpt-oss-20b:MXFP4}
runs=${MOE_RUNS:-2}
tests=${MOE_TESTS:--p 0 -n 128}
for m in $models; do
  f="$CARGO_TARGET_DIR/models/${m%%:*}-${m##*:}.gguf"
  [ -f "$f" ] || /usr/bin/time -f "gen-model ${m%%:*} %e s" .gpu/bin/xtask gen-model \
    --preset "${m%%:*}" --type "${m##*:}" --fast-kquants --out "$f" 2>&1 | tail -2
done

if [ "$mode" = profile ]; then
  for m in $models; do
    f="$CARGO_TARGET_DIR/models/${m%%:*}-${m##*:}.gguf"
    echo "== profile ${m%%:*}"
    ROCMFORGE_VULKAN_PROFILE=groups .gpu/bin/xtask bench --backend vulkan --model "$f" \
      -p 0 -n 64 -r 1 2>&1 | grep -E "^\| (kernel|---|[a-z])|profile" | head -40 | tee -a "$out/profile.md"
  done
fi

if [ "$mode" = bench ]; then
  variants=${*:--}
  for r in $(seq "$runs"); do
    for m in $models; do
      f="$CARGO_TARGET_DIR/models/${m%%:*}-${m##*:}.gguf"
      for v in $variants; do
        kv=()
        [ "$v" = - ] || IFS=+ read -ra kv <<<"${v//%/ }"
        bin=xtask backend=vulkan envs=(ROCMFORGE_HIP_RUNTIME=cuda)
        for a in "${kv[@]}"; do
          case "$a" in
            BIN=*) bin=${a#BIN=} ;;
            BACKEND=*) backend=${a#BACKEND=} ;;
            *) envs+=("$a") ;;
          esac
        done
        # shellcheck disable=SC2086 # the tests are words.
        env "${envs[@]}" ".gpu/bin/$bin" bench --backend "$backend" \
          --model "$f" $tests -r 2 -o md 2>&1 | grep -E "^\| [a-z].*\| (tg|pp)" |
          sed "s/|.*markers: [^|]*|/|/; s/^/$r $v /" | tee -a "$out/moe-bench.md"
      done
    done
  done
  if [ -x .llvk/llama-bench ]; then
    for r in $(seq "$runs"); do
      for m in $models; do
        f="$CARGO_TARGET_DIR/models/${m%%:*}-${m##*:}.gguf"
        # shellcheck disable=SC2086 # the tests are words.
        .llvk/llama-bench -m "$f" $tests -r "${MOE_LLAMA_REPS:-3}" -o jsonl 2>/dev/null |
          python3 -c '
import json, statistics, sys
for line in sys.stdin:
    j = json.loads(line)
    ts = j["samples_ts"]
    test = "pp%d" % j["n_prompt"] if j["n_gen"] == 0 else "tg%d" % j["n_gen"]
    print("%s %s: mean %.1f median %.1f samples %s" % (j["model_filename"].split("/")[-1], test,
          statistics.mean(ts), statistics.median(ts), " ".join("%.1f" % t for t in ts)))
' | sed "s/^/$r llama.cpp /" | tee -a "$out/moe-bench.md"
      done
    done
  fi
fi
