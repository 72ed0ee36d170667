//! The session contract on every backend: bad inputs are errors that leave
//! the backend usable, device allocations do not follow the tensor count,
//! and a session records a bounded number of graphs.

use rocmforge_conformance::*;
use rocmforge_core::quant::QuantType;
use rocmforge_core::session::{SessionError, SessionOptions};

#[test]
fn bad_token_ids_and_context_overflow_are_errors_and_the_session_goes_on() {
    for backend in backends_under_test() {
        let _device = device_lock();
        let model = generated_model("tiny-qwen3", QuantType::Q8_0);
        let n_vocab = model.config.n_vocab;
        let opts = SessionOptions {
            kv_types: Default::default(),
            n_ctx: 32,
            n_batch: 8,
            all_logits: false,
            n_seq: 1,
        };
        let mut s = session(&model, backend, opts);
        let good = s.eval(&[1, 2, 3]).unwrap().to_vec();
        let err = s.eval(&[5, n_vocab as u32, 6]).unwrap_err();
        assert!(
            matches!(err, SessionError::TokenOutOfRange { id, .. } if id == n_vocab as u32),
            "{backend}: {err}"
        );
        let err = s.eval(&[u32::MAX]).unwrap_err();
        assert!(
            matches!(err, SessionError::TokenOutOfRange { .. }),
            "{backend}: {err}"
        );
        assert_eq!(s.n_past(), 3, "{backend}: a rejected step must not advance");
        let err = s.eval(&[1; 30]).unwrap_err();
        assert!(
            matches!(
                err,
                SessionError::ContextFull {
                    needed: 33,
                    n_ctx: 32
                }
            ),
            "{backend}: {err}"
        );
        assert!(matches!(
            s.eval(&[]).unwrap_err(),
            SessionError::EmptyPrompt
        ));
        // Still usable, and still computing the same function.
        s.reset();
        let again = s.eval(&[1, 2, 3]).unwrap().to_vec();
        assert_eq!(good, again, "{backend}: replay after errors differs");
        // A decode step's launches are known from the start on a backend
        // that launches kernels (the bench reports them), none on the CPU.
        match (backend, s.step_launches(1)) {
            ("cpu", launches) => assert_eq!(launches, None),
            (_, launches) => assert!(launches.is_some_and(|n| n > 0), "{backend}: {launches:?}"),
        }
    }
}

#[test]
fn device_allocations_do_not_follow_the_tensor_count() {
    for backend in backends_under_test() {
        let _device = device_lock();
        let mut counts = Vec::new();
        for stem in ["tiny-llama", "tiny-qwen2", "tiny-qwen3"] {
            let model = generated_model(stem, QuantType::Q4K);
            let mut s = session(&model, backend, compare_options(false));
            s.eval(&random_tokens(23, model.config.n_vocab, 9)).unwrap();
            for t in 0..3 {
                s.eval(&[t]).unwrap();
            }
            let n = s.backend().allocations().device_allocations;
            assert!(
                n > 0 && n <= 8,
                "{backend} {stem}: {n} allocations for {} tensors",
                model.file.tensors().len()
            );
            counts.push((model.file.tensors().len(), n));
        }
        eprintln!("{backend}: (tensors, allocations) {counts:?}");
        assert!(
            counts.windows(2).all(|w| w[0].1 == w[1].1),
            "{backend}: allocation count changes with the model: {counts:?}"
        );
    }
}

#[test]
fn recorded_graphs_stay_bounded_for_any_prompt_length() {
    for backend in backends_under_test() {
        let _device = device_lock();
        let model = generated_model("tiny-qwen2", QuantType::Q8_0);
        let opts = SessionOptions {
            kv_types: Default::default(),
            n_ctx: 1024,
            n_batch: 24,
            all_logits: false,
            n_seq: 1,
        };
        let mut s = session(&model, backend, opts);
        for n in 1..=40 {
            s.reset();
            s.eval(&random_tokens(n, model.config.n_vocab, n as u64))
                .unwrap();
        }
        // 24, 16, 8, 4, 2, 1.
        assert!(
            s.recorded_graphs() <= 6,
            "{backend}: {} graphs",
            s.recorded_graphs()
        );
    }
}

#[test]
fn split_prompts_equal_one_batch() {
    // A prompt evaluated in steps of 16 + 4 + 2 + 1 gives the logits of the
    // same prompt in one step of 32 (positions and KV writes line up).
    for backend in backends_under_test() {
        let _device = device_lock();
        let model = generated_model("tiny-llama", QuantType::Q4K);
        let prompt = random_tokens(23, model.config.n_vocab, 3);
        let mut small = session(&model, backend, compare_options(true));
        let split = small.eval(&prompt).unwrap().to_vec();
        let opts = SessionOptions {
            n_batch: 23,
            ..compare_options(true)
        };
        let mut whole = session(&model, backend, opts);
        let one = whole.eval(&prompt).unwrap().to_vec();
        let n_vocab = model.config.n_vocab;
        for (row, (a, b)) in split.chunks(n_vocab).zip(one.chunks(n_vocab)).enumerate() {
            let (max, mean) = row_error(a, b);
            assert!(
                max <= 0.05 && mean <= 0.01,
                "{backend} row {row}: split vs whole max {max} mean {mean}"
            );
        }
    }
}
