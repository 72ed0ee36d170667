//! GGUF metadata as llama.cpp's converter writes it: `general.*`, the
//! architecture's hyper-parameters, and a real tokenizer copied from the
//! vocab-only files in `testdata/tokenizer/`.

use std::path::Path;

use rocmforge_core::gguf::{GgufFile, GgufValue};
use rocmforge_core::quant::QuantType;

use super::layout::file_type;
use super::GenError;
use crate::presets::{Arch, Preset, Vocab};

type Metadata = Vec<(String, GgufValue)>;

/// `general.quantization_version`: the current ggml quantized block formats.
const QUANTIZATION_VERSION: u32 = 2;

/// llama.cpp's token types (`llama_token_type`).
const TOKEN_TYPE_CONTROL: i32 = 3;

/// Llama 3's named special tokens and their ids; the rest of 128000..128256
/// are `<|reserved_special_token_N|>`.
const LLAMA3_SPECIAL: &[(u64, &str)] = &[
    (128000, "<|begin_of_text|>"),
    (128001, "<|end_of_text|>"),
    (128004, "<|finetune_right_pad_id|>"),
    (128006, "<|start_header_id|>"),
    (128007, "<|end_header_id|>"),
    (128008, "<|eom_id|>"),
    (128009, "<|eot_id|>"),
    (128010, "<|python_tag|>"),
];
const LLAMA3_SPECIAL_START: u64 = 128000;
const LLAMA3_LAST_RESERVED: u64 = 247;
const LLAMA3_BOS: u32 = 128000;
const LLAMA3_EOS: u32 = 128001;

/// Everything except the tokenizer, in the converter's order.
pub fn model_metadata(p: &Preset, ty: QuantType) -> Metadata {
    let arch = p.arch.name();
    let key = |k: &str| format!("{arch}.{k}");
    let u32v = |v: u64| GgufValue::U32(u32::try_from(v).expect("preset numbers fit in u32"));
    let mut m = vec![
        (
            "general.architecture".to_string(),
            GgufValue::String(arch.into()),
        ),
        (
            "general.name".to_string(),
            GgufValue::String(format!("random {}", p.model)),
        ),
        (key("context_length"), u32v(p.n_ctx)),
        (key("embedding_length"), u32v(p.n_embd)),
        (key("block_count"), u32v(p.n_layer)),
        (key("feed_forward_length"), u32v(p.n_ff)),
        (key("attention.head_count"), u32v(p.n_head)),
        (key("attention.head_count_kv"), u32v(p.n_head_kv)),
        (key("rope.freq_base"), GgufValue::F32(p.rope_base)),
        (
            key("attention.layer_norm_rms_epsilon"),
            GgufValue::F32(p.rms_eps),
        ),
    ];
    if p.explicit_head_dim {
        m.push((key("attention.key_length"), u32v(p.head_dim)));
        m.push((key("attention.value_length"), u32v(p.head_dim)));
    }
    if p.arch == Arch::Llama {
        // The converter's Llama class adds these two; the Qwen classes do not.
        m.push((key("vocab_size"), u32v(p.n_vocab)));
    }
    if let Some(moe) = &p.moe {
        m.push((key("expert_count"), u32v(moe.n_expert)));
        m.push((key("expert_used_count"), u32v(moe.n_expert_used)));
        // Llama files (Mixtral) give the expert width as
        // feed_forward_length, and llama.cpp reads it from there.
        if p.arch != Arch::Llama {
            m.push((key("expert_feed_forward_length"), u32v(moe.n_ff_exp)));
        }
        if let Some(n_sh) = moe.n_ff_shared {
            m.push((key("expert_shared_feed_forward_length"), u32v(n_sh)));
        }
    }
    if let Some(window) = p.sliding_window {
        m.push((key("attention.sliding_window"), u32v(window)));
    }
    if let Some(yarn) = &p.yarn {
        m.push((key("rope.scaling.type"), GgufValue::String("yarn".into())));
        m.push((key("rope.scaling.factor"), GgufValue::F32(yarn.factor)));
        m.push((
            key("rope.scaling.original_context_length"),
            u32v(yarn.original_context),
        ));
        if let Some(ms) = &yarn.mistral {
            m.push((
                key("rope.scaling.yarn_beta_fast"),
                GgufValue::F32(ms.beta_fast),
            ));
            m.push((
                key("rope.scaling.yarn_beta_slow"),
                GgufValue::F32(ms.beta_slow),
            ));
            m.push((
                key("rope.scaling.yarn_log_multiplier"),
                GgufValue::F32(ms.log_mul),
            ));
            m.push((
                key("attention.temperature_scale"),
                GgufValue::F32(ms.temperature_scale),
            ));
        }
    }
    m.push((key("rope.dimension_count"), u32v(p.head_dim)));
    m.push((
        "general.quantization_version".into(),
        GgufValue::U32(QUANTIZATION_VERSION),
    ));
    m.push(("general.file_type".into(), GgufValue::U32(file_type(ty))));
    m
}

/// The `tokenizer.*` keys for `p`, read from `testdata/tokenizer/`.
pub fn tokenizer_metadata(p: &Preset, tokenizer_dir: &Path) -> Result<Metadata, GenError> {
    let path = tokenizer_dir.join(p.vocab.file_name());
    let file = GgufFile::open(&path).map_err(|source| GenError::Vocab {
        path: path.clone(),
        source,
    })?;
    let mut m: Metadata = file
        .metadata()
        .iter()
        .filter(|(k, _)| k.starts_with("tokenizer."))
        .cloned()
        .collect();
    if p.vocab == Vocab::Llama3FromGpt2 {
        pad_to_llama3(&mut m, p.n_vocab).map_err(|what| GenError::VocabContent {
            path: path.clone(),
            what,
        })?;
    }
    if p.vocab == Vocab::GptOssFromGpt2 {
        pad_to_harmony(&mut m, p.n_vocab).map_err(|what| GenError::VocabContent {
            path: path.clone(),
            what,
        })?;
    }
    if p.vocab == Vocab::GemmaFromLlamaSpm {
        pad_with_unused(&mut m, p.n_vocab).map_err(|what| GenError::VocabContent {
            path: path.clone(),
            what,
        })?;
    }
    let n_tokens = get(&m, "tokenizer.ggml.tokens")
        .and_then(GgufValue::as_array)
        .map(<[GgufValue]>::len)
        .ok_or_else(|| GenError::VocabContent {
            path: path.clone(),
            what: "no tokenizer.ggml.tokens array".into(),
        })?;
    if n_tokens as u64 != p.n_vocab {
        return Err(GenError::VocabContent {
            path,
            what: format!("{n_tokens} tokens, preset {} needs {}", p.name, p.n_vocab),
        });
    }
    if let Some(what) = repeated_token(&m) {
        return Err(GenError::VocabContent { path, what });
    }
    Ok(m)
}

/// The first token whose text repeats an earlier one's, if any: llama.cpp
/// maps texts to ids one to one and aborts loading a vocab otherwise.
fn repeated_token(m: &Metadata) -> Option<String> {
    let tokens = get(m, "tokenizer.ggml.tokens")?.as_array()?;
    let mut seen = std::collections::HashMap::with_capacity(tokens.len());
    for (id, t) in tokens.iter().enumerate() {
        let text = t.as_str()?;
        if let Some(first) = seen.insert(text, id) {
            return Some(format!("token {id} repeats token {first}'s text {text:?}"));
        }
    }
    None
}

fn get<'a>(m: &'a Metadata, key: &str) -> Option<&'a GgufValue> {
    m.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// A copy of array `key`, or what is missing.
fn array(m: &Metadata, key: &str) -> Result<Vec<GgufValue>, String> {
    match get(m, key) {
        Some(GgufValue::Array(items)) => Ok(items.clone()),
        _ => Err(format!("no {key} array")),
    }
}

fn set(m: &mut Metadata, key: &str, value: GgufValue) {
    match m.iter_mut().find(|(k, _)| k == key) {
        Some(entry) => entry.1 = value,
        None => m.push((key.to_string(), value)),
    }
}

/// Turns the GPT-2 vocab into a Llama 3-sized one: CONTROL tokens up to
/// `n_vocab`, Llama 3's special tokens at their real ids, Llama 3's BOS/EOS
/// and pre-tokenizer.
fn pad_to_llama3(m: &mut Metadata, n_vocab: u64) -> Result<(), String> {
    let mut tokens = array(m, "tokenizer.ggml.tokens")?;
    let mut types = array(m, "tokenizer.ggml.token_type")?;
    let n_base = tokens.len() as u64;
    if n_base > LLAMA3_SPECIAL_START || types.len() as u64 != n_base {
        return Err(format!(
            "{n_base} tokens and {} token types do not fit below Llama 3's special tokens",
            types.len()
        ));
    }
    for id in n_base..n_vocab {
        tokens.push(GgufValue::String(llama3_padding_token(id, n_base)));
        types.push(GgufValue::I32(TOKEN_TYPE_CONTROL));
    }
    set(m, "tokenizer.ggml.tokens", GgufValue::Array(tokens));
    set(m, "tokenizer.ggml.token_type", GgufValue::Array(types));
    set(
        m,
        "tokenizer.ggml.pre",
        GgufValue::String("llama-bpe".into()),
    );
    set(m, "tokenizer.ggml.bos_token_id", GgufValue::U32(LLAMA3_BOS));
    set(m, "tokenizer.ggml.eos_token_id", GgufValue::U32(LLAMA3_EOS));
    set(m, "tokenizer.ggml.add_bos_token", GgufValue::Bool(true));
    Ok(())
}

/// The harmony format's named special tokens and their ids in o200k; the
/// rest from 199998 on are `<|reserved_N|>`.
const HARMONY_SPECIAL: &[(u64, &str)] = &[
    (199998, "<|startoftext|>"),
    (199999, "<|endoftext|>"),
    (200002, "<|return|>"),
    (200003, "<|constrain|>"),
    (200005, "<|channel|>"),
    (200006, "<|start|>"),
    (200007, "<|end|>"),
    (200008, "<|message|>"),
    (200012, "<|call|>"),
];
const HARMONY_BOS: u32 = 199998;
const HARMONY_EOS: u32 = 200002;

/// Turns the GPT-2 vocab into an o200k-sized one: CONTROL tokens up to
/// `n_vocab` (the harmony ones at their ids when the vocab reaches them),
/// o200k's pre-tokenizer, and no BOS token added. A vocab too small to hold
/// the harmony tokens (the tiny preset) keeps GPT-2's own BOS/EOS.
fn pad_to_harmony(m: &mut Metadata, n_vocab: u64) -> Result<(), String> {
    let mut tokens = array(m, "tokenizer.ggml.tokens")?;
    let mut types = array(m, "tokenizer.ggml.token_type")?;
    let n_base = tokens.len() as u64;
    if types.len() as u64 != n_base {
        return Err(format!("{n_base} tokens but {} token types", types.len()));
    }
    for id in n_base..n_vocab {
        let name = match HARMONY_SPECIAL.iter().find(|s| s.0 == id) {
            Some(&(_, name)) => {
                // GPT-2's own `<|endoftext|>` (50256) moves to o200k's id:
                // the base token becomes a reserved one, as a text may
                // name one token only (llama.cpp aborts on a repeat).
                if let Some(j) = tokens.iter().position(|t| t.as_str() == Some(name)) {
                    tokens[j] = GgufValue::String(format!("<|reserved_{j}|>"));
                }
                name.to_string()
            }
            None => format!("<|reserved_{id}|>"),
        };
        tokens.push(GgufValue::String(name));
        types.push(GgufValue::I32(TOKEN_TYPE_CONTROL));
    }
    set(m, "tokenizer.ggml.tokens", GgufValue::Array(tokens));
    set(m, "tokenizer.ggml.token_type", GgufValue::Array(types));
    set(m, "tokenizer.ggml.pre", GgufValue::String("gpt-4o".into()));
    if n_vocab > u64::from(HARMONY_EOS) {
        set(
            m,
            "tokenizer.ggml.bos_token_id",
            GgufValue::U32(HARMONY_BOS),
        );
        set(
            m,
            "tokenizer.ggml.eos_token_id",
            GgufValue::U32(HARMONY_EOS),
        );
    }
    set(m, "tokenizer.ggml.add_bos_token", GgufValue::Bool(false));
    Ok(())
}

/// Pads an SPM vocab with CONTROL tokens `<unused{N}>` (with score 0) up
/// to `n_vocab`, as Gemma's vocab reserves them.
fn pad_with_unused(m: &mut Metadata, n_vocab: u64) -> Result<(), String> {
    let mut tokens = array(m, "tokenizer.ggml.tokens")?;
    let mut types = array(m, "tokenizer.ggml.token_type")?;
    let mut scores = array(m, "tokenizer.ggml.scores")?;
    let n_base = tokens.len() as u64;
    for i in 0..n_vocab.saturating_sub(n_base) {
        tokens.push(GgufValue::String(format!("<unused{i}>")));
        types.push(GgufValue::I32(TOKEN_TYPE_CONTROL));
        scores.push(GgufValue::F32(0.0));
    }
    set(m, "tokenizer.ggml.tokens", GgufValue::Array(tokens));
    set(m, "tokenizer.ggml.token_type", GgufValue::Array(types));
    set(m, "tokenizer.ggml.scores", GgufValue::Array(scores));
    Ok(())
}

/// The text of padding token `id` when the base vocab has `n_base` tokens.
fn llama3_padding_token(id: u64, n_base: u64) -> String {
    if let Some(&(_, name)) = LLAMA3_SPECIAL.iter().find(|s| s.0 == id) {
        return name.to_string();
    }
    let n = if id >= LLAMA3_SPECIAL_START {
        // As in Llama 3: 128002, 128003, 128005, 128011.. are reserved 0, 1, 2, 3..
        let named_below = LLAMA3_SPECIAL.iter().filter(|s| s.0 < id).count() as u64;
        id - LLAMA3_SPECIAL_START - named_below
    } else {
        // Real Llama 3 stops at 247; continuing from there keeps texts unique.
        LLAMA3_LAST_RESERVED + 1 + (id - n_base)
    };
    format!("<|reserved_special_token_{n}|>")
}
