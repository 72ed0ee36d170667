//! `tokenizer.ggml.pre` names → pre-tokenizer type and the vocabulary flags
//! llama.cpp sets with it (`llama_vocab::impl::load`).
//!
//! Several names share one type (the same regexes) but differ in flags, so the
//! table is by name.

/// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`: which regexes cut words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreType {
    Default,
    Llama3,
    Jais2,
    DeepseekLlm,
    Deepseek3Llm,
    Spark25,
    Youtu,
    DeepseekCoder,
    Falcon,
    Starcoder,
    Gpt2,
    Qwen2,
    Qwen35,
    Bloom,
    ChatGlm4,
    Viking,
    Tekken,
    Chameleon,
    Gpt4o,
    GraniteEmbMulti,
    TinyAya,
    KimiK2,
    SuperBpe,
    BailingMoe,
    SeedCoder,
    Ufakzeka,
    Afmoe,
    Laguna,
    ExaoneMoe,
    /// SPM-style BPE over raw UTF-8 with spaces as U+2581.
    Gemma4,
    /// Gemma 4's shape without its newline and BOS special cases.
    SarvamMoe,
    MiniCpm5,
    Whitespace,
}

/// What a pre-tokenizer name selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreSpec {
    pub kind: PreType,
    /// Look a whole word up in the vocabulary before merging it.
    pub ignore_merges: bool,
    /// Prompts start with BOS unless `add_bos_token` says otherwise.
    pub add_bos: bool,
    /// The file's BOS id is ignored (ChatGLM/GLM-4 have none).
    pub no_bos: bool,
    /// Words map bytes to GPT-2's printable characters before merging; off for
    /// the SPM-style BPE vocabularies, which hold raw UTF-8 and `<0xXX>` bytes.
    pub byte_encode: bool,
    /// Spaces become U+2581 before pre-tokenizing.
    pub escape_whitespace: bool,
}

const fn spec(kind: PreType) -> PreSpec {
    PreSpec {
        kind,
        ignore_merges: false,
        add_bos: false,
        no_bos: false,
        byte_encode: !matches!(
            kind,
            PreType::Gemma4 | PreType::SarvamMoe | PreType::Whitespace
        ),
        escape_whitespace: matches!(kind, PreType::Gemma4 | PreType::SarvamMoe),
    }
}

const fn merges_ignored(s: PreSpec) -> PreSpec {
    PreSpec {
        ignore_merges: true,
        ..s
    }
}

const fn with_bos(s: PreSpec) -> PreSpec {
    PreSpec { add_bos: true, ..s }
}

const fn without_bos(s: PreSpec) -> PreSpec {
    PreSpec { no_bos: true, ..s }
}

use PreType as T;

/// Every name llama.cpp accepts, with what it selects.
const TABLE: &[(&[&str], PreSpec)] = &[
    (&["default"], spec(T::Default)),
    (&["minicpm5"], merges_ignored(spec(T::MiniCpm5))),
    (
        &[
            "llama3",
            "llama-v3",
            "llama-bpe",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
            "jina-v5-nano",
        ],
        with_bos(merges_ignored(spec(T::Llama3))),
    ),
    (&["dbrx", "smaug-bpe"], spec(T::Llama3)),
    (&["jais-2"], spec(T::Jais2)),
    (&["deepseek-llm"], spec(T::DeepseekLlm)),
    (&["deepseek-coder"], spec(T::DeepseekCoder)),
    (
        &["deepseek-v3", "hunyuan-dense", "hy_v4", "joyai-llm"],
        spec(T::Deepseek3Llm),
    ),
    (&["spark2_5"], spec(T::Spark25)),
    (&["youtu"], merges_ignored(spec(T::Youtu))),
    (&["falcon"], spec(T::Falcon)),
    (
        &[
            "mpt",
            "gpt-2",
            "phi-2",
            "jina-es",
            "jina-de",
            "gigachat",
            "jina-v2-es",
            "jina-v2-de",
            "a.x-4.0",
            "mellum",
            "modern-bert",
            "jina-v1-en",
            "jina-v2-code",
            "roberta-bpe",
            "olmo",
            "jais",
            "exaone4",
            "trillion",
            "granite-docling",
        ],
        spec(T::Gpt2),
    ),
    (
        &[
            "starcoder",
            "refact",
            "command-r",
            "smollm",
            "codeshell",
            "exaone",
            "minerva-7b",
            "mellum2",
        ],
        spec(T::Starcoder),
    ),
    (&["gemma4", "granite-embed-multi-311m"], spec(T::Gemma4)),
    (&["sarvam-moe"], spec(T::SarvamMoe)),
    (&["whitespace"], spec(T::Whitespace)),
    (
        &[
            "qwen2",
            "deepseek-r1-qwen",
            "kormo",
            "f2llmv2",
            "stablelm2",
            "megrez",
            "hunyuan",
            "solar-open",
        ],
        spec(T::Qwen2),
    ),
    (&["qwen35"], spec(T::Qwen35)),
    (&["poro-chat", "bloom", "gpt3-finnish"], spec(T::Bloom)),
    (&["chatglm-bpe"], without_bos(spec(T::ChatGlm4))),
    (
        &["glm4", "glm5"],
        without_bos(merges_ignored(spec(T::ChatGlm4))),
    ),
    (&["viking"], spec(T::Viking)),
    (&["tekken"], with_bos(merges_ignored(spec(T::Tekken)))),
    (&["chameleon"], with_bos(spec(T::Chameleon))),
    (
        &["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"],
        spec(T::Gpt4o),
    ),
    (
        &["granite-embed-multi-97m"],
        merges_ignored(spec(T::GraniteEmbMulti)),
    ),
    (&["tiny_aya", "cohere2moe"], spec(T::TinyAya)),
    (&["superbpe"], spec(T::SuperBpe)),
    (
        &["bailingmoe", "bailingmoe2", "llada-moe"],
        spec(T::BailingMoe),
    ),
    (&["seed-coder"], spec(T::SeedCoder)),
    (&["kimi-k2"], spec(T::KimiK2)),
    (&["ufakzeka"], spec(T::Ufakzeka)),
    (&["grok-2"], spec(T::Qwen2)),
    (&["afmoe"], spec(T::Afmoe)),
    (&["laguna"], spec(T::Laguna)),
    (&["exaone-moe"], spec(T::ExaoneMoe)),
];

/// What `name` selects, or `None` for a name llama.cpp does not know either.
pub fn lookup(name: &str) -> Option<PreSpec> {
    TABLE
        .iter()
        .find(|(names, _)| names.contains(&name))
        .map(|&(_, spec)| spec)
}

/// Every known name, for tests and diagnostics.
pub fn all_names() -> impl Iterator<Item = &'static str> {
    TABLE.iter().flat_map(|(names, _)| names.iter().copied())
}

/// The spec of a file with no `tokenizer.ggml.pre`: llama.cpp's default.
pub fn missing() -> PreSpec {
    spec(PreType::Default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_carry_llama_cpp_flags() {
        let mut names: Vec<&str> = all_names().collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n, "a name is listed twice");
        let llama3 = lookup("llama-bpe").unwrap();
        assert!(llama3.ignore_merges && llama3.add_bos && llama3.byte_encode);
        let dbrx = lookup("dbrx").unwrap();
        assert_eq!(dbrx.kind, PreType::Llama3);
        assert!(!dbrx.ignore_merges && !dbrx.add_bos);
        assert!(lookup("glm4").unwrap().no_bos);
        let gemma = lookup("gemma4").unwrap();
        assert!(!gemma.byte_encode && gemma.escape_whitespace);
        assert_eq!(lookup("deepseek-llm").unwrap().kind, PreType::DeepseekLlm);
        assert_eq!(lookup("qwen35").unwrap().kind, PreType::Qwen35);
        assert_eq!(lookup("bert-bge"), None);
    }
}
