//! `rocmforge perplexity`'s method on every backend against the numbers
//! `llama-perplexity` printed for the fixture models (`testdata/perplexity`,
//! `-c 128`): every running estimate `[k]`, the final estimate and its ±.
//!
//! Tolerance. The values are compared as log-perplexities, i.e. mean
//! negative log-likelihoods (random-weight models give perplexities in the
//! millions, so only relative agreement means anything). A token's nll is
//! `logsumexp(row) - row[token]`; both terms move by at most the row's
//! largest |Δlogit|, and on average over tokens by the row's mean |Δlogit|,
//! since which token is scored has nothing to do with where the rounding
//! differences fall. The fixture tests hold every backend to a mean
//! |Δlogit| of 0.035σ per row against llama.cpp (`fixtures.rs`), σ being
//! the row's standard deviation, so a mean nll (and with it ln PPL) may move
//! by up to 2 · 0.035 · σ̄, σ̄ the mean σ of the scored rows, which the test
//! measures from our own logits. The ± is `PPL · sd(nll) / sqrt(n - 1)`;
//! its log moves with ln PPL plus ln sd(nll), and sd(nll) moves by at most
//! the largest per-token change, 2 · 0.2σ (the fixture tests' max bound),
//! relative to sd(nll) itself.

use std::sync::Arc;

use rocmforge_conformance::*;
use rocmforge_core::model::Model;
use rocmforge_core::perplexity::{self, ChunkPlan};
use rocmforge_core::session::SessionOptions;
use rocmforge_core::tokenizer::Tokenizer;

/// Mean |Δlogit| per row against llama.cpp, in row σ (fixtures.rs).
const MEAN_REL: f64 = 0.035;
/// Largest |Δlogit| per row against llama.cpp, in row σ (fixtures.rs).
const MAX_REL: f64 = 0.2;

const STEMS: &[&str] = &["tiny-llama-Q4_K_M", "tiny-qwen2-Q8_0", "tiny-qwen3-Q8_0"];
const N_CTX: usize = 128;

/// What llama-perplexity printed.
struct Reference {
    running: Vec<f64>,
    estimate: f64,
    error: f64,
    n_chunks: usize,
}

fn perplexity_path(name: &str) -> std::path::PathBuf {
    rocmforge_genmodel::repo_root()
        .join("testdata/perplexity")
        .join(name)
}

fn reference(stem: &str) -> Reference {
    let text = std::fs::read_to_string(perplexity_path(&format!("{stem}.ppl"))).unwrap();
    let mut lines = text.lines();
    let running = lines
        .next()
        .unwrap()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.split(']').nth(1).unwrap().parse().unwrap())
        .collect();
    let fin = lines.next().unwrap();
    let fin = fin.strip_prefix("Final estimate: PPL = ").unwrap();
    let (estimate, error) = fin.split_once(" +/- ").unwrap();
    let n_chunks = text
        .split("calculating perplexity over ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    Reference {
        running,
        estimate: estimate.parse().unwrap(),
        error: error.parse().unwrap(),
        n_chunks,
    }
}

/// The text's tokens as llama-perplexity makes them: BOS as the file says,
/// no special-token parsing, the file's final newline dropped.
fn text_tokens(model: &Model) -> (Vec<u32>, Option<u32>) {
    let tok = Tokenizer::from_gguf(&model.file).unwrap();
    let text = std::fs::read_to_string(perplexity_path("text.txt")).unwrap();
    let text = text.strip_suffix('\n').unwrap_or(&text);
    let bos = tok.add_bos_default().then(|| tok.bos()).flatten();
    (tok.encode(text, tok.add_bos_default(), false), bos)
}

/// Mean standard deviation of the scored logit rows of the first chunk.
fn mean_row_sigma(logits: &[f32], n_vocab: usize) -> f64 {
    let rows: Vec<&[f32]> = logits.chunks(n_vocab).skip(N_CTX / 2).collect();
    let sigma = |r: &[f32]| {
        let n = r.len() as f64;
        let mean = r.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        (r.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / n).sqrt()
    };
    rows.iter().map(|r| sigma(r)).sum::<f64>() / rows.len() as f64
}

#[test]
fn perplexity_matches_llama_perplexity() {
    for backend in backends_under_test() {
        let _device = device_lock();
        for stem in STEMS {
            let model = Arc::new(Model::load(&fixture_path(&format!("{stem}.gguf"))).unwrap());
            let want = reference(stem);
            let (tokens, bos) = text_tokens(&model);
            let plan = ChunkPlan::new(tokens.len(), N_CTX, None).unwrap();
            assert_eq!(plan.n_chunks, want.n_chunks, "{stem}: chunk count");
            let opts = SessionOptions {
                n_ctx: N_CTX,
                // Two steps per chunk: the second half is evaluated against
                // a KV cache the first step wrote.
                n_batch: N_CTX / 2,
                all_logits: true,
            };
            let mut s = session(&model, backend, opts);
            let got = perplexity::evaluate(&mut s, &tokens, plan, bos, &mut |_, _| {}).unwrap();

            // σ̄ from the first chunk's rows, evaluated again as it was scored.
            let mut first = tokens[..N_CTX].to_vec();
            if let Some(b) = bos {
                first[0] = b;
            }
            s.reset();
            let sigma = mean_row_sigma(s.eval(&first).unwrap(), model.config.n_vocab);
            let ln_tol = 2.0 * MEAN_REL * sigma;

            let mut worst = 0f64;
            for (k, (g, w)) in got.running.iter().zip(&want.running).enumerate() {
                let d = (g.ln() - w.ln()).abs();
                worst = worst.max(d);
                assert!(
                    d <= ln_tol,
                    "{backend} {stem} [{}]: {g:.4} vs llama.cpp {w:.4} (|Δ ln PPL| {d:.5} > {ln_tol:.5})",
                    k + 1
                );
            }
            assert_eq!(got.running.len(), want.running.len());
            let d = (got.estimate().ln() - want.estimate.ln()).abs();
            assert!(d <= ln_tol, "{backend} {stem}: final {} vs {}", got.estimate(), want.estimate);

            let err = got.standard_error().unwrap();
            let n = got.sums.count as f64;
            let sd = (err / got.estimate()) * (n - 1.0).sqrt();
            let err_tol = ln_tol + 2.0 * MAX_REL * sigma / sd;
            let d_err = (err.ln() - want.error.ln()).abs();
            assert!(
                d_err <= err_tol,
                "{backend} {stem}: ± {err:.5} vs llama.cpp {:.5} (|Δ ln| {d_err:.5} > {err_tol:.5})",
                want.error
            );
            eprintln!(
                "{backend} {stem}: PPL {:.4} +/- {err:.5} (llama.cpp {:.4} +/- {:.5}); \
                 worst |Δ ln PPL| {worst:.2e} (tolerance {ln_tol:.3}), |Δ ln ±| {d_err:.2e}",
                got.estimate(),
                want.estimate,
                want.error
            );
        }
    }
}
