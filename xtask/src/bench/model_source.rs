//! The default benchmark model: a generated preset, cached in `target/models/`
//! because generating a real-shape model takes far longer than benchmarking it.

use std::path::{Path, PathBuf};

use rocmforge_core::quant::QuantType;

use super::BenchError;
use crate::gen_model::{self, GenModelArgs, DEFAULT_SEED};
use rocmforge_genmodel::presets::Preset;

/// `$CARGO_TARGET_DIR`, or the workspace's `target/` (named from the
/// workspace root, not as `xtask/../target`, so it prints clean).
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => {
            let xtask = Path::new(env!("CARGO_MANIFEST_DIR"));
            xtask.parent().unwrap_or(xtask).join("target")
        }
    }
}

pub fn cached_path(target: &Path, preset: &Preset, ty: QuantType) -> PathBuf {
    target
        .join("models")
        .join(format!("{}-{}.gguf", preset.name, ty.name()))
}

/// The cached model's path, generating it first if it is missing. gen-model
/// writes to a temporary name and renames, so an interrupted generation never
/// leaves a truncated file that would be taken as cached.
pub fn generated_model(preset: &'static Preset, ty: QuantType) -> Result<PathBuf, BenchError> {
    let path = cached_path(&target_dir(), preset, ty);
    if path.is_file() {
        return Ok(path);
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| BenchError::ModelDir {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    eprintln!("bench: generating {}", super::report::clean_path(&path));
    gen_model::run(&GenModelArgs {
        preset,
        ty,
        out: path.clone(),
        seed: DEFAULT_SEED,
        fast_kquants: false,
    })?;
    Ok(path)
}
