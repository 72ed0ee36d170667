//! A loaded model: the mapped GGUF file, its config and its located weights.

mod config;
pub mod moe;
mod weights;

use std::path::Path;
use std::sync::Arc;

pub use config::{Arch, AttnTemperature, ModelConfig, ARCH_KEYS, GENERAL_KEYS};
pub use moe::{ExpertActivation, MoeConfig};
pub use weights::{
    ExpertBiases, FfnWeights, LayerWeights, ModelWeights, SharedExpert, WeightId, WeightRef,
    WEIGHT_ALIGN,
};

use crate::gguf::{GgufError, GgufFile};
use crate::quant::QuantType;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("unsupported architecture {0:?} (supported: {names})", names = Arch::supported_names())]
    UnsupportedArch(String),
    #[error("missing metadata key '{0}'")]
    MissingKey(String),
    /// The value has the wrong type (a string where a number belongs).
    #[error("{key} {reason}")]
    BadKey { key: String, reason: String },
    /// The value has the right type but cannot be right (a head count of 0).
    #[error("{key} is {value}; it must be {expected}")]
    BadValue {
        key: String,
        value: String,
        expected: String,
    },
    /// A valid value describing something this project does not run.
    #[error("{key} is {value}: {feature} is not supported")]
    Unsupported {
        key: String,
        value: String,
        feature: String,
    },
    /// Values that each look fine but disagree with each other or with the
    /// tensor shapes.
    #[error("inconsistent hyperparameters: {0}")]
    Contradiction(String),
    #[error("missing tensor '{0}'")]
    MissingTensor(String),
    #[error("tensor '{tensor}' has shape {actual:?}, expected {expected:?}")]
    ShapeMismatch {
        tensor: String,
        expected: Vec<u64>,
        actual: Vec<u64>,
    },
    #[error("tensor '{tensor}' has type {ty}, which is not supported here")]
    UnsupportedType { tensor: String, ty: QuantType },
}

/// A model ready to hand to a backend. The file stays mapped for the model's
/// lifetime: weights are read through the mapping, never copied whole into RAM.
pub struct Model {
    pub file: Arc<GgufFile>,
    pub config: ModelConfig,
    pub weights: ModelWeights,
}

impl Model {
    pub fn load(path: &Path) -> Result<Model, ModelError> {
        Model::from_file(GgufFile::open(path)?)
    }

    pub fn from_file(file: GgufFile) -> Result<Model, ModelError> {
        let config = ModelConfig::from_gguf(&file)?;
        let weights = ModelWeights::from_gguf(&file, &config)?;
        Ok(Model {
            file: Arc::new(file),
            config,
            weights,
        })
    }

    /// The bytes of one weight, read through the mapping: a whole tensor,
    /// or the rows of a fused one (Phi-3's QKV) that the weight names.
    pub fn weight_bytes(&self, id: WeightId) -> &[u8] {
        let w = self.weights.get(id);
        let start = w.file_offset as usize;
        &self.file.as_bytes()[start..start + w.n_bytes as usize]
    }
}
