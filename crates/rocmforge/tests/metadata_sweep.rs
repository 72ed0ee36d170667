//! Every metadata key the loader reads, set to every kind of bad value, in
//! each tiny fixture model: parsing, `Model::from_file`, the tokenizer and a
//! short CPU session (a 4-token prompt, one decode step) must each either
//! work or fail with a one-line error. A panic anywhere fails the test, which
//! lists every (fixture, key, value) that panicked and where.
//!
//! The keys come from the loader's own lists (`ModelConfig::metadata_keys`,
//! `tokenizer::METADATA_KEYS`, `gguf::ALIGNMENT_KEY`). Each reader
//! debug-asserts that it reads nothing else, and
//! `every_read_namespace_key_is_swept` fails when a fixture carries a key in
//! a namespace the loader reads from that the lists lack.
//!
//! Only the stages that read a key run on the changed metadata; the others
//! reuse the unchanged fixture's result. Rewriting and re-parsing a
//! 150k-token vocabulary for every case would take minutes, and the debug
//! assertions make the shortcut sound: a stage cannot depend on a key it
//! does not read.
//! - Keys the model reads go through the GGUF writer, the parser and
//!   `Model::from_file`, and through `Tokenizer::from_gguf` when the
//!   tokenizer reads them too. The rewritten file leaves out the tokenizer
//!   keys neither stage then reads.
//! - Keys only the tokenizer reads go through `Tokenizer::from_metadata`
//!   with the value substituted in the lookup (what `from_gguf` does), and
//!   the session runs the unchanged model on the resulting prompt.

use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, Once};

use rocmforge_core::gguf::{GgufFile, GgufValue, GgufWriter, ALIGNMENT_KEY};
use rocmforge_core::model::{Model, ModelConfig, GENERAL_KEYS};
use rocmforge_core::session::{Session, SessionError, SessionOptions};
use rocmforge_core::tokenizer::{Tokenizer, METADATA_KEYS as TOKENIZER_KEYS};
use rocmforge_cpu::CpuBackend;

const LLAMA: &str = "tiny-llama-Q4_K_M.gguf";
const QWEN2: &str = "tiny-qwen2-Q8_0.gguf";
const QWEN3: &str = "tiny-qwen3-Q8_0.gguf";

/// A metadata change to try: the key, a description, and the new value
/// (`None` removes the key).
struct Case {
    key: String,
    what: String,
    value: Option<GgufValue>,
}

fn case(key: &str, what: &str, value: Option<GgufValue>) -> Case {
    Case {
        key: key.to_string(),
        what: what.to_string(),
        value,
    }
}

/// A fixture read once; every case is built from its metadata and tensor
/// bytes.
struct Fixture {
    name: &'static str,
    file: GgufFile,
}

impl Fixture {
    fn load(name: &'static str) -> Fixture {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../testdata/reference")
            .join(name);
        let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        Fixture { name, file }
    }

    fn arch(&self) -> &str {
        self.file
            .architecture()
            .expect("fixtures name their architecture")
    }

    fn value(&self, key: &str) -> Option<&GgufValue> {
        self.file.get(key)
    }

    /// Keys the parser or the model loader reads (some the tokenizer too).
    fn model_keys(&self) -> Vec<String> {
        let mut keys = ModelConfig::metadata_keys(self.arch());
        keys.push(ALIGNMENT_KEY.to_string());
        keys
    }

    /// Keys only the tokenizer reads.
    fn tokenizer_only_keys(&self) -> Vec<&'static str> {
        let model_keys = self.model_keys();
        TOKENIZER_KEYS
            .iter()
            .copied()
            .filter(|k| !model_keys.iter().any(|m| m == k))
            .collect()
    }

    /// The fixture with `key` set to `value` (removed for `None`) and the
    /// metadata `keep` rejects left out, as GGUF bytes.
    ///
    /// `general.alignment` cannot go through the writer, which refuses to
    /// lay out a file by a bad alignment: it is written under a stand-in
    /// key of the same length and renamed in the bytes, so the data section
    /// stays where the default alignment put it.
    fn with(&self, key: &str, value: Option<&GgufValue>, keep: impl Fn(&str) -> bool) -> Vec<u8> {
        const STAND_IN: &str = "general.alignmenX";
        let mut w = GgufWriter::new();
        for (k, v) in self.file.metadata() {
            if k != key && keep(k) {
                w.add_metadata(k, v.clone());
            }
        }
        let renamed = key == ALIGNMENT_KEY;
        if let Some(v) = value {
            w.add_metadata(if renamed { STAND_IN } else { key }, v.clone());
        }
        for t in self.file.tensors() {
            w.declare_tensor(&t.name, &t.shape, t.ty).unwrap();
        }
        let mut stream = w.stream_to(Vec::new()).unwrap();
        for t in self.file.tensors() {
            stream.write_tensor(self.file.tensor_data(t)).unwrap();
        }
        let mut bytes = stream.finish().unwrap();
        if renamed && value.is_some() {
            let at = bytes
                .windows(STAND_IN.len())
                .position(|w| w == STAND_IN.as_bytes())
                .expect("the stand-in key was written");
            bytes[at..at + ALIGNMENT_KEY.len()].copy_from_slice(ALIGNMENT_KEY.as_bytes());
        }
        bytes
    }
}

/// The bad values every key is tried with; `None` removes the key.
fn bad_values() -> Vec<(&'static str, Option<GgufValue>)> {
    vec![
        ("0", Some(GgufValue::U32(0))),
        ("1", Some(GgufValue::U32(1))),
        ("huge u64", Some(GgufValue::U64(1 << 40))),
        ("u64::MAX", Some(GgufValue::U64(u64::MAX))),
        ("u32::MAX", Some(GgufValue::U32(u32::MAX))),
        ("-1 i32", Some(GgufValue::I32(-1))),
        ("-1 i64", Some(GgufValue::I64(-1))),
        ("NaN", Some(GgufValue::F32(f32::NAN))),
        ("+Inf", Some(GgufValue::F32(f32::INFINITY))),
        ("-Inf", Some(GgufValue::F32(f32::NEG_INFINITY))),
        ("1e30", Some(GgufValue::F32(1e30))),
        ("1e300 f64", Some(GgufValue::F64(1e300))),
        // A line break, so that an error quoting the value unescaped shows.
        ("string", Some(GgufValue::from("not a\nnumber"))),
        ("empty string", Some(GgufValue::from(""))),
        ("bool", Some(GgufValue::Bool(true))),
        ("array of numbers", Some(GgufValue::from(vec![1u32, 2, 3]))),
        ("empty array", Some(GgufValue::Array(vec![]))),
        ("removed", None),
    ]
}

/// Every key in `keys` with every bad value.
fn generic_cases(keys: &[impl AsRef<str>]) -> Vec<Case> {
    let mut cases = Vec::new();
    for key in keys {
        for (what, value) in bad_values() {
            cases.push(case(key.as_ref(), what, value));
        }
    }
    cases
}

/// A tokenizer array with the wrong length or element type.
fn array_cases(f: &Fixture, key: &str) -> Vec<Case> {
    let Some(GgufValue::Array(items)) = f.value(key) else {
        return Vec::new();
    };
    let n = items.len();
    let mut longer = items.clone();
    longer.push(items[0].clone());
    vec![
        case(
            key,
            "one short",
            Some(GgufValue::Array(items[1..].to_vec())),
        ),
        case(key, "one extra", Some(GgufValue::Array(longer))),
        case(key, "u32 elements", Some(GgufValue::from(vec![7u32; n]))),
        case(
            key,
            "NaN elements",
            Some(GgufValue::from(vec![f32::NAN; n])),
        ),
        case(
            key,
            "string elements",
            Some(GgufValue::from(vec!["x\ny"; n])),
        ),
        case(
            key,
            "nested arrays",
            Some(GgufValue::from(vec![vec![1u8]; n])),
        ),
    ]
}

/// Changes to keys the model reads: the generic bad values, values
/// llama.cpp accepts (which must load and run), and bad token lists.
fn model_cases(f: &Fixture) -> Vec<Case> {
    let mut cases = generic_cases(&f.model_keys());
    let arch = f.arch();
    let key = |k: &str| format!("{arch}.{k}");
    let n_layer = f.value(&key("block_count")).and_then(GgufValue::as_u64);
    for k in [
        "attention.head_count",
        "attention.head_count_kv",
        "feed_forward_length",
    ] {
        if let Some(v) = f.value(&key(k)).and_then(GgufValue::as_u32) {
            let per_layer = GgufValue::from(vec![v; n_layer.unwrap_or(1) as usize]);
            cases.push(case(&key(k), "per-layer array", Some(per_layer)));
        }
    }
    for (k, v) in [
        ("rope.scaling.type", GgufValue::from("none")),
        ("rope.scaling.type", GgufValue::from("yarn")),
        ("rope.scaling.factor", GgufValue::F32(2.0)),
        ("rope.scale_linear", GgufValue::F64(0.5)),
        ("rope.freq_base", GgufValue::F64(10000.0)),
        ("attention.layer_norm_rms_epsilon", GgufValue::U32(1)),
        ("context_length", GgufValue::U64(64)),
    ] {
        cases.push(case(&key(k), "valid variant", Some(v)));
    }
    let tokens_key = "tokenizer.ggml.tokens";
    cases.extend(array_cases(f, tokens_key));
    if let Some(GgufValue::Array(tokens)) = f.value(tokens_key) {
        let mut dup = tokens.clone();
        dup[5] = dup[4].clone();
        cases.push(case(tokens_key, "a duplicate", Some(GgufValue::Array(dup))));
        let mut empty = tokens.clone();
        empty[5] = GgufValue::from("");
        cases.push(case(
            tokens_key,
            "an empty token",
            Some(GgufValue::Array(empty)),
        ));
    }
    cases
}

/// Changes to keys only the tokenizer reads: the generic bad values, bad
/// arrays, token types and scores, special ids at and past the end.
fn tokenizer_cases(f: &Fixture) -> Vec<Case> {
    let mut cases = generic_cases(&f.tokenizer_only_keys());
    for key in [
        "tokenizer.ggml.scores",
        "tokenizer.ggml.token_type",
        "tokenizer.ggml.merges",
    ] {
        cases.extend(array_cases(f, key));
    }
    let n = f
        .value("tokenizer.ggml.tokens")
        .and_then(GgufValue::as_array)
        .map_or(0, <[GgufValue]>::len);
    let types = [
        ("all control", 3),
        ("all byte", 6),
        ("all unknown", 2),
        ("all user-defined", 4),
        ("i32::MAX", i32::MAX),
        ("negative", -7),
    ];
    for (what, t) in types {
        let v = GgufValue::from(vec![t; n]);
        cases.push(case("tokenizer.ggml.token_type", what, Some(v)));
    }
    let odd_scores: Vec<f32> = (0..n)
        .map(|i| [f32::NAN, f32::INFINITY, f32::NEG_INFINITY][i % 3])
        .collect();
    let v = GgufValue::from(odd_scores);
    cases.push(case("tokenizer.ggml.scores", "NaN and infinities", Some(v)));
    let merges = [
        ("a rule without a space", vec!["ab"]),
        ("unknown tokens", vec!["zzzq qqqz", "Ġ Ġ", "Ġ ĠĠ"]),
    ];
    for (what, rules) in merges {
        let v = GgufValue::from(rules);
        cases.push(case("tokenizer.ggml.merges", what, Some(v)));
    }
    for key in TOKENIZER_KEYS.iter().filter(|k| k.ends_with("_id")) {
        let n = n as u64;
        cases.push(case(key, "n_vocab", Some(GgufValue::U64(n))));
        cases.push(case(key, "n_vocab - 1", Some(GgufValue::U64(n - 1))));
        cases.push(case(key, "i64::MIN", Some(GgufValue::I64(i64::MIN))));
    }
    for model in ["llama", "gpt2", "bert", "gemma4", "t5"] {
        let v = GgufValue::from(model);
        cases.push(case("tokenizer.ggml.model", model, Some(v)));
    }
    for pre in [
        "qwen2",
        "llama3",
        "default",
        "no-such-pre",
        "gemma4",
        "deepseek-llm",
        "kimi-k2",
    ] {
        let v = GgufValue::from(pre);
        cases.push(case("tokenizer.ggml.pre", pre, Some(v)));
    }
    cases
}

thread_local! {
    /// Whether a panic on this thread is one `Outcome::stage` catches.
    static CATCHING: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Panics inside a stage are expected and caught: keep each one's message
/// and place for the report instead of printing a backtrace per case. Any
/// other panic (a failed assertion of the test itself) reports as usual.
fn record_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !CATCHING.with(Cell::get) {
                return default(info);
            }
            let payload = info.payload();
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let at = info.location().map(|l| l.to_string()).unwrap_or_default();
            LAST_PANIC.with(|p| *p.borrow_mut() = format!("{msg} at {at}"));
        }));
    });
}

/// What went wrong in one case: panics and multi-line error messages.
#[derive(Default)]
struct Outcome {
    failures: Vec<String>,
}

impl Outcome {
    /// Runs `stage`, recording a panic or a multi-line error; `None` when it
    /// produced no value.
    fn stage<T, E: std::fmt::Display>(
        &mut self,
        name: &str,
        stage: impl FnOnce() -> Result<T, E>,
    ) -> Option<T> {
        CATCHING.with(|c| c.set(true));
        let result = catch_unwind(AssertUnwindSafe(stage));
        CATCHING.with(|c| c.set(false));
        match result {
            Ok(Ok(v)) => Some(v),
            Ok(Err(e)) => {
                let msg = e.to_string();
                if msg.contains('\n') {
                    self.failures
                        .push(format!("{name}: multi-line error {msg:?}"));
                }
                None
            }
            Err(_) => {
                let msg = LAST_PANIC.with(|p| p.borrow().clone());
                self.failures.push(format!("{name} panicked: {msg}"));
                None
            }
        }
    }

    /// Four prompt ids from `tokenizer` (encoding and decoding text on the
    /// way), or fixed ones without a tokenizer.
    fn prompt(&mut self, tokenizer: Option<&Tokenizer>) -> Vec<u32> {
        let Some(t) = tokenizer else {
            return vec![0, 1, 2, 3];
        };
        let mut ids = self
            .stage("encode", || {
                let ids = t.encode("Hello world, once upon a time", true, true);
                let _ = t.decode(&ids);
                Ok::<_, String>(ids)
            })
            .unwrap_or_default();
        ids.resize(4, 0);
        ids
    }

    /// A CPU session: the prompt, then one greedy decode step.
    fn session(&mut self, model: Arc<Model>, prompt: &[u32]) {
        let opts = SessionOptions {
            n_ctx: 64,
            ..Default::default()
        };
        self.stage("session", || {
            let backend = Box::new(CpuBackend::new(1));
            let mut s = Session::new(model, backend, opts, &mut |_, _| {})?;
            let logits = s.eval(prompt)?;
            let next = logits
                .iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map_or(0, |(i, _)| i as u32);
            s.eval(&[next])?;
            Ok::<_, SessionError>(())
        });
    }
}

/// The unchanged fixture's tokenizer and model, reused by stages a case
/// does not touch.
struct Baseline {
    tokenizer: Tokenizer,
    model: Arc<Model>,
}

impl Baseline {
    fn of(f: &Fixture) -> Baseline {
        let name = f.name;
        let bytes = f.with(ALIGNMENT_KEY, None, |_| true);
        let file = GgufFile::from_bytes(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let tokenizer = Tokenizer::from_gguf(&file).unwrap_or_else(|e| panic!("{name}: {e}"));
        let model = Model::from_file(file).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut out = Outcome::default();
        let prompt = out.prompt(Some(&tokenizer));
        let model = Arc::new(model);
        out.session(model.clone(), &prompt);
        assert!(out.failures.is_empty(), "{name}: {:?}", out.failures);
        Baseline { tokenizer, model }
    }
}

/// A change to a key the model reads, through a rewritten file.
fn run_model_case(f: &Fixture, base: &Baseline, c: &Case) -> Outcome {
    let mut out = Outcome::default();
    let tokenizer_reads = c.key == ALIGNMENT_KEY || TOKENIZER_KEYS.contains(&c.key.as_str());
    let keep =
        |k: &str| tokenizer_reads || !k.starts_with("tokenizer.") || GENERAL_KEYS.contains(&k);
    let Some(file) = out.stage("parse", || {
        GgufFile::from_bytes(f.with(&c.key, c.value.as_ref(), keep))
    }) else {
        return out;
    };
    let changed_tokenizer = if tokenizer_reads {
        out.stage("tokenizer", || Tokenizer::from_gguf(&file))
    } else {
        None
    };
    let tokenizer = match tokenizer_reads {
        true => changed_tokenizer.as_ref(),
        false => Some(&base.tokenizer),
    };
    let prompt = out.prompt(tokenizer);
    if let Some(model) = out.stage("model", || Model::from_file(file)) {
        out.session(Arc::new(model), &prompt);
    }
    out
}

/// A change to a key only the tokenizer reads, substituted in its lookup.
fn run_tokenizer_case(f: &Fixture, base: &Baseline, c: &Case) -> Outcome {
    let mut out = Outcome::default();
    let lookup = |k: &str| match k == c.key {
        true => c.value.as_ref(),
        false => f.value(k),
    };
    let tokenizer = out.stage("tokenizer", || Tokenizer::from_metadata(lookup));
    let prompt = out.prompt(tokenizer.as_ref());
    out.session(base.model.clone(), &prompt);
    out
}

/// Runs `cases` on fixture `f` and fails listing every panic and
/// multi-line error.
fn sweep(f: &Fixture, cases: &[Case], run: fn(&Fixture, &Baseline, &Case) -> Outcome) {
    record_panics();
    let base = Baseline::of(f);
    let mut failures = Vec::new();
    for c in cases {
        for failure in run(f, &base, c).failures {
            failures.push(format!("{}: {} = {}: {failure}", f.name, c.key, c.what));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

fn sweep_model_keys(name: &'static str) {
    let f = Fixture::load(name);
    sweep(&f, &model_cases(&f), run_model_case);
}

#[test]
fn llama_model_keys() {
    sweep_model_keys(LLAMA);
}

#[test]
fn qwen2_model_keys() {
    sweep_model_keys(QWEN2);
}

#[test]
fn qwen3_model_keys() {
    sweep_model_keys(QWEN3);
}

/// The tokenizer keys of each distinct tokenizer among `names`: fixtures
/// whose `tokenizer.*` metadata equals one already swept would only repeat
/// its cases.
fn sweep_tokenizer_keys(names: &[&'static str]) {
    let mut swept: Vec<Vec<(String, GgufValue)>> = Vec::new();
    for &name in names {
        let f = Fixture::load(name);
        let tokenizer_meta: Vec<(String, GgufValue)> = f
            .file
            .metadata()
            .iter()
            .filter(|(k, _)| k.starts_with("tokenizer."))
            .cloned()
            .collect();
        if swept.contains(&tokenizer_meta) {
            continue;
        }
        sweep(&f, &tokenizer_cases(&f), run_tokenizer_case);
        swept.push(tokenizer_meta);
    }
}

#[test]
fn spm_tokenizer_keys() {
    sweep_tokenizer_keys(&[LLAMA]);
}

#[test]
fn bpe_tokenizer_keys() {
    sweep_tokenizer_keys(&[QWEN2, QWEN3]);
}

/// A key in a namespace the loader reads (`{arch}.*`, `tokenizer.ggml.*`)
/// that the sweep does not cover is either read without a sweep entry (the
/// loader would trip its debug assertion) or a key the loader ignores; both
/// deserve a look when a fixture gains one.
#[test]
fn every_read_namespace_key_is_swept() {
    for name in [LLAMA, QWEN2, QWEN3] {
        let f = Fixture::load(name);
        let mut swept = f.model_keys();
        swept.extend(f.tokenizer_only_keys().iter().map(|k| k.to_string()));
        let arch_prefix = format!("{}.", f.arch());
        let unswept: Vec<&str> = f
            .file
            .metadata()
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| k.starts_with(&arch_prefix) || k.starts_with("tokenizer.ggml."))
            .filter(|k| !swept.iter().any(|s| s == k))
            .collect();
        assert!(unswept.is_empty(), "{name}: keys not swept: {unswept:?}");
    }
}
