//! The newer families from the command line: files that cannot be run are
//! one clear error (an architecture this project does not build, expert
//! counts that contradict the router and expert tensors, LongRoPE factors).

mod common;

use std::path::{Path, PathBuf};

use common::{assert_one_line_error, run, scratch_dir};
use rocmforge_core::gguf::{GgufFile, GgufValue, GgufWriter};
use rocmforge_core::quant::QuantType;
use rocmforge_genmodel::find;

/// A tiny preset's Q8_0 model, generated once per build tree.
fn generated(preset: &str) -> PathBuf {
    let dir = rocmforge_genmodel::repo_root().join("target/conformance-models");
    rocmforge_genmodel::cached(find(preset).unwrap(), QuantType::Q8_0, &dir).unwrap()
}

fn tiny_moe() -> PathBuf {
    generated("tiny-qwen3moe")
}

/// A copy of `src` named `name`, with metadata key `key` set to `value`
/// and `extra` tensors (name, shape, F32 values) added.
fn rewrite(
    src: &Path,
    name: &str,
    key: &str,
    value: GgufValue,
    extra: &[(&str, &[f32])],
) -> PathBuf {
    let src = GgufFile::open(src).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        w.add_metadata(k, if k == key { value.clone() } else { v.clone() });
    }
    for t in src.tensors() {
        w.add_tensor(&t.name, &t.shape, t.ty, src.tensor_data(t).to_vec())
            .unwrap();
    }
    for (tensor, values) in extra {
        let bytes = values.iter().flat_map(|f| f.to_le_bytes()).collect();
        w.add_tensor(tensor, &[values.len() as u64], QuantType::F32, bytes)
            .unwrap();
    }
    let path = scratch_dir("families").join(format!("{name}.gguf"));
    std::fs::write(&path, w.to_bytes().unwrap()).unwrap();
    path
}

/// A copy of tiny-qwen3moe with metadata key `key` set to `value`.
fn with_key(name: &str, key: &str, value: GgufValue) -> PathBuf {
    rewrite(&tiny_moe(), name, key, value, &[])
}

fn generate_with(path: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "generate",
        "--gguf",
        path.to_str().unwrap(),
        "--prompt",
        "hi",
        "--backend",
        "cpu",
        "-n",
        "1",
    ];
    args.extend_from_slice(extra);
    run(&args)
}

fn generate(path: &Path) -> std::process::Output {
    generate_with(path, &[])
}

#[test]
fn the_unchanged_file_generates() {
    let o = generate(&tiny_moe());
    assert!(o.status.success(), "{}", common::stderr(&o));
}

#[test]
fn unsupported_architecture_names_it() {
    let p = with_key(
        "arch",
        "general.architecture",
        GgufValue::String("deepseek2".into()),
    );
    assert_one_line_error(&generate(&p), 1, "unsupported architecture \"deepseek2\"");
}

#[test]
fn expert_count_contradicting_the_router_is_an_error() {
    let p = with_key("count", "qwen3moe.expert_count", GgufValue::U32(16));
    assert_one_line_error(&generate(&p), 1, "qwen3moe.expert_count is 16");
}

#[test]
fn experts_used_beyond_the_count_is_an_error() {
    let p = with_key("used", "qwen3moe.expert_used_count", GgufValue::U32(9));
    assert_one_line_error(&generate(&p), 1, "qwen3moe.expert_used_count is 9");
}

#[test]
fn expert_width_contradicting_the_tensors_is_an_error() {
    let p = with_key(
        "width",
        "qwen3moe.expert_feed_forward_length",
        GgufValue::U32(96),
    );
    assert_one_line_error(
        &generate(&p),
        1,
        "qwen3moe.expert_feed_forward_length is 96",
    );
}

#[test]
fn a_moe_arch_without_experts_is_an_error() {
    let p = with_key("none", "qwen3moe.expert_count", GgufValue::U32(0));
    assert_one_line_error(&generate(&p), 1, "qwen3moe.expert_count");
}

/// llama.cpp leaves Phi-3's sliding window out (its converters write it
/// wrongly); so does the engine, so a long context is plain attention.
#[test]
fn phi3_runs_past_the_window_its_file_names() {
    let o = generate_with(&generated("tiny-phi3"), &["--ctx-size", "4096"]);
    assert!(o.status.success(), "{}", common::stderr(&o));
}

#[test]
fn phi3_longrope_factors_are_refused() {
    let name = GgufValue::String("phi3 with LongRoPE".into());
    let factors = [1.0f32; 16];
    let path = rewrite(
        &generated("tiny-phi3"),
        "longrope",
        "general.name",
        name,
        &[("rope_factors_long.weight", &factors)],
    );
    assert_one_line_error(&generate(&path), 1, "LongRoPE");
}

#[test]
fn gpt_oss_generates() {
    let o = generate(&generated("tiny-gpt-oss"));
    assert!(o.status.success(), "{}", common::stderr(&o));
}

/// Every other gpt-oss layer attends over the window; a file without one
/// is refused, as llama.cpp refuses it.
#[test]
fn gpt_oss_without_a_window_is_an_error() {
    let p = rewrite(
        &generated("tiny-gpt-oss"),
        "gpt-oss-window",
        "gpt-oss.attention.sliding_window",
        GgufValue::U32(0),
        &[],
    );
    assert_one_line_error(&generate(&p), 1, "gpt-oss.attention.sliding_window is 0");
}
