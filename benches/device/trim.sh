#!/usr/bin/env bash
# The device transfer is capped at 64 MiB, and the tree is larger (the
# reference fixtures and the tokenizer test files). `trim.sh out` moves
# what the device scripts do not need out of the working tree into
# ../offtree (each file replaced by a symlink marked skip-worktree, so git
# sees no change); `trim.sh in` puts everything back. Kept: the tokenizer
# files gen-model copies vocabularies from, and the fixtures named in
# KEEP_FIXTURES (stems, space-separated; none by default).
set -euo pipefail
cd "$(dirname "$0")/../.."
off=../offtree
mode=${1:?usage: trim.sh out|in}
needed() {
  case "$1" in
    testdata/tokenizer/ggml-vocab-llama-spm.gguf | testdata/tokenizer/ggml-vocab-qwen2.gguf | \
      testdata/tokenizer/ggml-vocab-gpt-2.gguf | testdata/tokenizer/ggml-vocab-phi-3.gguf) return 0 ;;
  esac
  for stem in ${KEEP_FIXTURES:-}; do
    case "$1" in testdata/reference/"$stem".*) return 0 ;; esac
  done
  return 1
}
files=(testdata/tokenizer/ggml-vocab-* testdata/reference/*.gguf testdata/reference/*.logits)
if [ "$mode" = out ]; then
  for f in "${files[@]}"; do
    { [ -L "$f" ] || needed "$f"; } && continue
    mkdir -p "$off/$(dirname "$f")"
    mv "$f" "$off/$f"
    ln -s "$(realpath "$off/$f")" "$f"
    git update-index --skip-worktree "$f"
  done
elif [ "$mode" = in ]; then
  for f in "${files[@]}"; do
    [ -L "$f" ] || continue
    rm "$f"
    mv "$off/$f" "$f"
    git update-index --no-skip-worktree "$f"
  done
else
  echo "usage: trim.sh out|in" >&2
  exit 2
fi
