//! Random-weight GGUF files with the exact tensor layout, metadata and
//! tokenizer of real llama.cpp-converted models.

pub mod layout;
mod metadata;
mod rope_scaling;
mod weights;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use indicatif::ProgressBar;
use rocmforge_core::gguf::{GgufError, GgufValue, GgufWriter};
use rocmforge_core::quant::{QuantError, QuantType};

use crate::presets::Preset;
use layout::TensorSpec;
pub use weights::Quantizer;

/// The seed when `--seed` is not given, so that files made on different
/// machines or days are byte-identical.
pub const DEFAULT_SEED: u64 = 0x5eed_0001;

#[derive(Debug, thiserror::Error)]
pub enum GenError {
    #[error("cannot read tokenizer vocab {}: {source}", path.display())]
    Vocab {
        path: PathBuf,
        #[source]
        source: GgufError,
    },
    #[error("tokenizer vocab {}: {what}", path.display())]
    VocabContent { path: PathBuf, what: String },
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("GGUF writer: {0}")]
    Gguf(#[from] GgufError),
    #[error("encoding {tensor} as {ty}: {source}")]
    Quant {
        tensor: String,
        ty: QuantType,
        #[source]
        source: QuantError,
    },
}

/// Everything that goes into the file, before any weight is generated.
#[derive(Debug)]
pub struct ModelPlan {
    pub metadata: Vec<(String, GgufValue)>,
    pub tensors: Vec<TensorSpec>,
    pub quantizer: Quantizer,
}

impl ModelPlan {
    pub fn new(preset: &Preset, ty: QuantType, tokenizer_dir: &Path) -> Result<Self, GenError> {
        let mut metadata = metadata::model_metadata(preset, ty);
        // The converter writes the tokenizer after the hyper-parameters and
        // llama-quantize moves the general.* bookkeeping keys last.
        let split = metadata
            .iter()
            .position(|(k, _)| k == "general.quantization_version")
            .unwrap_or(metadata.len());
        let tail = metadata.split_off(split);
        metadata.extend(metadata::tokenizer_metadata(preset, tokenizer_dir)?);
        metadata.extend(tail);
        Ok(ModelPlan {
            metadata,
            tensors: layout::tensors(preset, ty),
            quantizer: Quantizer::Reference,
        })
    }

    /// The model without tokenizer metadata: loadable and runnable from
    /// token ids, but not from text. For device probes, which must work
    /// from the binary alone, without the repository's vocabulary files.
    pub fn without_tokenizer(preset: &Preset, ty: QuantType) -> Self {
        ModelPlan {
            metadata: metadata::model_metadata(preset, ty),
            tensors: layout::tensors(preset, ty),
            quantizer: Quantizer::Reference,
        }
    }

    pub fn tensor_bytes(&self) -> u64 {
        self.tensors.iter().map(TensorSpec::n_bytes).sum()
    }

    /// One line per kind of fallback, e.g. "F16 instead of Q8_0 for 3 tensors
    /// (blk.*.ffn_down.weight): rows of 176 are not whole Q8_0 blocks of 32".
    pub fn fallback_notes(&self) -> Vec<String> {
        let mut groups: BTreeMap<(&str, &str, u64), (usize, Vec<String>)> = BTreeMap::new();
        for t in &self.tensors {
            let Some(from) = t.fallback_from else {
                continue;
            };
            let group = groups
                .entry((t.ty.name(), from.name(), t.row_len()))
                .or_default();
            group.0 += 1;
            let pattern = layer_pattern(&t.name);
            if !group.1.contains(&pattern) {
                group.1.push(pattern);
            }
        }
        groups
            .into_iter()
            .map(|((to, from, row_len), (count, names))| {
                let block = QuantType::from_name(from).map_or(0, QuantType::block_size);
                format!(
                    "{to} instead of {from} for {count} tensor{} ({}): rows of {row_len} are not whole {from} blocks of {block}",
                    if count == 1 { "" } else { "s" },
                    names.join(", ")
                )
            })
            .collect()
    }
}

/// `blk.12.attn_q.weight` → `blk.*.attn_q.weight`.
fn layer_pattern(name: &str) -> String {
    match name
        .strip_prefix("blk.")
        .and_then(|rest| rest.split_once('.'))
    {
        Some((layer, rest)) if layer.bytes().all(|b| b.is_ascii_digit()) => {
            format!("blk.*.{rest}")
        }
        _ => name.to_string(),
    }
}

/// The repository's `testdata/tokenizer/`.
pub fn tokenizer_dir() -> PathBuf {
    crate::repo_root().join("testdata/tokenizer")
}

/// Streams the whole model into `out`: header first, then each tensor as soon
/// as it is generated, so memory holds at most one tensor.
pub fn write_model<W: Write>(
    plan: &ModelPlan,
    seed: u64,
    threads: usize,
    out: W,
    progress: &ProgressBar,
) -> Result<W, GenError> {
    let mut writer = GgufWriter::new();
    for (key, value) in &plan.metadata {
        writer.add_metadata(key, value.clone());
    }
    for t in &plan.tensors {
        writer.declare_tensor(&t.name, &t.shape, t.ty)?;
    }
    let mut stream = writer.stream_to(out)?;
    for (index, t) in plan.tensors.iter().enumerate() {
        progress.set_message(t.name.clone());
        let inc = |n| progress.inc(n);
        let bytes =
            weights::encode_tensor_with(t, index as u64, seed, threads, plan.quantizer, &inc)
                .map_err(|source| GenError::Quant {
                    tensor: t.name.clone(),
                    ty: t.ty,
                    source,
                })?;
        stream.write_tensor(&bytes)?;
    }
    Ok(stream.finish()?)
}

/// Writes the model of `preset` with `ty` weights to `out` (through
/// `out.tmp`, renamed once complete, so a reader never sees half a file).
pub fn write_file(
    preset: &Preset,
    ty: QuantType,
    seed: u64,
    out: &Path,
    progress: &ProgressBar,
) -> Result<(), GenError> {
    write_file_with(preset, ty, seed, out, progress, Quantizer::Reference)
}

/// [`write_file`] with a choice of quantizer.
pub fn write_file_with(
    preset: &Preset,
    ty: QuantType,
    seed: u64,
    out: &Path,
    progress: &ProgressBar,
    quantizer: Quantizer,
) -> Result<(), GenError> {
    let tmp = tmp_path(out);
    // Opened first so that an unwritable path fails before any work.
    let file = File::create(&tmp).map_err(io_error("create", &tmp))?;
    let result = (|| {
        let mut plan = ModelPlan::new(preset, ty, &tokenizer_dir())?;
        plan.quantizer = quantizer;
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let writer = BufWriter::with_capacity(8 << 20, file);
        write_model(&plan, seed, threads, writer, progress)?
            .into_inner()
            .map_err(|e| io_error("write", &tmp)(e.into_error()))?;
        Ok(())
    })();
    if let Err(e) = result {
        // Best effort: the error being reported matters more than a leftover.
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, out).map_err(io_error("rename to final path", &tmp))
}

/// The default-seed model of `preset` with `ty` weights in `dir`
/// (`<preset>-<TYPE>.gguf`), written first if it is not there yet: the model
/// cache of test suites. Concurrent callers may both write it; the
/// temporary names differ and the rename is atomic, so readers never see
/// half a file.
pub fn cached(preset: &Preset, ty: QuantType, dir: &Path) -> Result<PathBuf, GenError> {
    let path = dir.join(format!("{}-{}.gguf", preset.name, ty.name()));
    if !path.exists() {
        std::fs::create_dir_all(dir).map_err(io_error("create", dir))?;
        write_file(preset, ty, DEFAULT_SEED, &path, &ProgressBar::hidden())?;
    }
    Ok(path)
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> GenError {
    let path = path.to_path_buf();
    move |source| GenError::Io {
        action,
        path,
        source,
    }
}

/// `model.gguf` → `model.gguf.tmp.<pid>.<n>`, next to it so the rename stays
/// on one filesystem and is atomic, and unique so that two writers of the
/// same model (tests running in parallel) never rename each other's file.
fn tmp_path(out: &Path) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut s = out.as_os_str().to_owned();
    s.push(format!(".tmp.{}.{n}", std::process::id()));
    PathBuf::from(s)
}
