// Dumps llama.cpp's outputs for a model in the format of the fixtures
// (testdata/README.md): M.tokens, M.logits (n_prompt x n_vocab f32 LE, all
// prompt positions in one batch), M.greedy (24 lines "id top1-top2 margin").
// Our own driver of llama.cpp's public API (llama.h); it is built against a
// llama.cpp checkout outside this repository, never vendored here.
// Usage: refdump MODEL.gguf OUT_PREFIX [PROMPT_FILE N_PROMPT N_STEPS N_CTX]
// With a prompt file (long-context references): its text, tokenized as
// above and cut to its first N_PROMPT tokens, is fed in chunks of 512 with
// the logits of the last position only, so no M.logits is written; M.greedy
// and M.decode get N_STEPS lines, in a context of N_CTX cells. Pick N_PROMPT
// so the last chunk is a power of two of at least 64 tokens (or 512): then
// rocmforge's session cuts the prompt into the same steps, and ggml's CPU
// attention takes the same path for each.
#include "llama.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <algorithm>
#include <cmath>

int main(int argc, char ** argv) {
    if (argc != 3 && argc != 7) {
        fprintf(stderr, "usage: refdump MODEL OUT_PREFIX [PROMPT_FILE N_PROMPT N_STEPS N_CTX]\n");
        return 2;
    }
    std::string prompt = "The quick brown fox jumps over the lazy dog. Once upon a time";
    const bool long_prompt = argc == 7;
    int n_prompt = 0, n_steps = 24, n_ctx = 4096;
    if (long_prompt) {
        FILE * fp = fopen(argv[3], "rb");
        if (!fp) { fprintf(stderr, "cannot open %s\n", argv[3]); return 1; }
        prompt.clear();
        char buf[4096];
        size_t got;
        while ((got = fread(buf, 1, sizeof buf, fp)) > 0) prompt.append(buf, got);
        fclose(fp);
        n_prompt = atoi(argv[4]);
        n_steps = atoi(argv[5]);
        n_ctx = atoi(argv[6]);
    }
    llama_backend_init();
    auto mp = llama_model_default_params();
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "load failed\n"); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    auto cp = llama_context_default_params();
    // REFDUMP_THREADS: ggml's split-KV decode gives each thread a chunk of
    // the cache with an f16 accumulator, so its precision at depth depends
    // on the thread count (testdata/README.md).
    const char * threads = getenv("REFDUMP_THREADS");
    const int nth = threads ? atoi(threads) : 2;
    cp.n_threads = nth; cp.n_threads_batch = nth; cp.n_ctx = n_ctx;
    // REFDUMP_CACHE_TYPE (f16, q8_0 or q4_0): K and V cache type, as
    // llama.cpp's -ctk / -ctv (a quantized V needs flash attention, which
    // the CPU's auto setting turns on).
    if (const char * ct = getenv("REFDUMP_CACHE_TYPE")) {
        ggml_type t;
        if (!strcmp(ct, "f16")) t = GGML_TYPE_F16;
        else if (!strcmp(ct, "q8_0")) t = GGML_TYPE_Q8_0;
        else if (!strcmp(ct, "q4_0")) t = GGML_TYPE_Q4_0;
        else { fprintf(stderr, "REFDUMP_CACHE_TYPE: f16, q8_0 or q4_0, not %s\n", ct); return 2; }
        cp.type_k = t; cp.type_v = t;
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    }
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "ctx failed\n"); return 1; }
    std::vector<llama_token> toks(prompt.size() + 8);
    int n = llama_tokenize(vocab, prompt.c_str(), prompt.size(), toks.data(), toks.size(),
                           llama_vocab_get_add_bos(vocab), false);
    if (n < 0) { fprintf(stderr, "tokenize failed\n"); return 1; }
    if (long_prompt) {
        if (n < n_prompt) { fprintf(stderr, "the prompt has %d tokens, not %d\n", n, n_prompt); return 1; }
        n = n_prompt;
    }
    toks.resize(n);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    std::string pre = argv[2];
    FILE * ft = fopen((pre + ".tokens").c_str(), "w");
    for (auto t : toks) fprintf(ft, "%d\n", t);
    fclose(ft);
    const int chunk = long_prompt ? 512 : n;
    llama_batch batch = llama_batch_init(chunk, 0, 1);
    for (int start = 0; start < n; start += chunk) {
        const int len = std::min(chunk, n - start);
        for (int i = 0; i < len; i++) {
            batch.token[i] = toks[start + i]; batch.pos[i] = start + i; batch.n_seq_id[i] = 1;
            batch.seq_id[i][0] = 0; batch.logits[i] = !long_prompt || start + i == n - 1;
        }
        batch.n_tokens = len;
        if (llama_decode(ctx, batch)) { fprintf(stderr, "decode failed\n"); return 1; }
    }
    if (!long_prompt) {
        FILE * fl = fopen((pre + ".logits").c_str(), "wb");
        for (int i = 0; i < n; i++) fwrite(llama_get_logits_ith(ctx, i), sizeof(float), n_vocab, fl);
        fclose(fl);
    }
    FILE * fg = fopen((pre + ".greedy").c_str(), "w");
    FILE * fd = fopen((pre + ".decode").c_str(), "w");
    const float * last = llama_get_logits_ith(ctx, long_prompt ? -1 : n - 1);
    int pos = n;
    for (int step = 0; step < n_steps; step++) {
        int best = 0, second = -1;
        for (int v = 1; v < n_vocab; v++) {
            if (last[v] > last[best]) { second = best; best = v; }
            else if (second < 0 || last[v] > last[second]) second = v;
        }
        fprintf(fg, "%d %.4f\n", best, last[best] - last[second]);
        double mean = 0, var = 0;
        for (int v = 0; v < n_vocab; v++) mean += last[v];
        mean /= n_vocab;
        for (int v = 0; v < n_vocab; v++) var += (last[v] - mean) * (last[v] - mean);
        std::vector<int> ids(n_vocab);
        for (int v = 0; v < n_vocab; v++) ids[v] = v;
        std::partial_sort(ids.begin(), ids.begin() + 16, ids.end(),
                          [&](int a, int b) { return last[a] > last[b] || (last[a] == last[b] && a < b); });
        fprintf(fd, "%.6g", std::sqrt(var / n_vocab));
        for (int i = 0; i < 16; i++) fprintf(fd, " %d:%.6g", ids[i], last[ids[i]]);
        fprintf(fd, "\n");
        llama_batch one = llama_batch_get_one(&best, 1);
        (void) pos; pos++;
        if (llama_decode(ctx, one)) { fprintf(stderr, "decode failed\n"); return 1; }
        last = llama_get_logits_ith(ctx, -1);
    }
    fclose(fg);
    fclose(fd);
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
