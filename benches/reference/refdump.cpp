// Dumps llama.cpp's outputs for a model in the format of the fixtures
// (testdata/README.md): M.tokens, M.logits (n_prompt x n_vocab f32 LE, all
// prompt positions in one batch), M.greedy (24 lines "id top1-top2 margin").
// Our own driver of llama.cpp's public API (llama.h); it is built against a
// llama.cpp checkout outside this repository, never vendored here.
// Usage: refdump MODEL.gguf OUT_PREFIX
#include "llama.h"
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include <algorithm>
#include <cmath>

int main(int argc, char ** argv) {
    if (argc != 3) { fprintf(stderr, "usage: refdump MODEL OUT_PREFIX\n"); return 2; }
    const std::string prompt = "The quick brown fox jumps over the lazy dog. Once upon a time";
    llama_backend_init();
    auto mp = llama_model_default_params();
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "load failed\n"); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    auto cp = llama_context_default_params();
    cp.n_threads = 2; cp.n_threads_batch = 2; cp.n_ctx = 4096;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "ctx failed\n"); return 1; }
    std::vector<llama_token> toks(prompt.size() + 8);
    int n = llama_tokenize(vocab, prompt.c_str(), prompt.size(), toks.data(), toks.size(),
                           llama_vocab_get_add_bos(vocab), false);
    if (n < 0) { fprintf(stderr, "tokenize failed\n"); return 1; }
    toks.resize(n);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    std::string pre = argv[2];
    FILE * ft = fopen((pre + ".tokens").c_str(), "w");
    for (auto t : toks) fprintf(ft, "%d\n", t);
    fclose(ft);
    llama_batch batch = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        batch.token[i] = toks[i]; batch.pos[i] = i; batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0; batch.logits[i] = true;
    }
    batch.n_tokens = n;
    if (llama_decode(ctx, batch)) { fprintf(stderr, "decode failed\n"); return 1; }
    FILE * fl = fopen((pre + ".logits").c_str(), "wb");
    for (int i = 0; i < n; i++) fwrite(llama_get_logits_ith(ctx, i), sizeof(float), n_vocab, fl);
    fclose(fl);
    FILE * fg = fopen((pre + ".greedy").c_str(), "w");
    FILE * fd = fopen((pre + ".decode").c_str(), "w");
    const float * last = llama_get_logits_ith(ctx, n - 1);
    int pos = n;
    for (int step = 0; step < 24; step++) {
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
