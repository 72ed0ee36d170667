//! What the tensors say about a model's shape: the ground truth that every
//! metadata value is checked against before it sizes anything.

use crate::gguf::{GgufFile, TensorInfo};

use super::super::ModelError;
use super::keys::MAX_SIZE;

/// What the tensors say about the model's shape.
pub(in crate::model) struct Shapes<'a> {
    file: &'a GgufFile,
    /// One more than the highest `N` of the `blk.N.*` tensors.
    pub(super) n_blocks: usize,
}

impl<'a> Shapes<'a> {
    pub(super) fn of(file: &'a GgufFile) -> Shapes<'a> {
        let n_blocks = file
            .tensors()
            .iter()
            .filter_map(|t| {
                t.name
                    .strip_prefix("blk.")?
                    .split('.')
                    .next()?
                    .parse::<usize>()
                    .ok()
            })
            .map(|i| i.saturating_add(1))
            .max()
            .unwrap_or(0);
        Shapes { file, n_blocks }
    }

    /// A 2-D tensor (a trailing unit dimension allowed, as for any weight).
    pub(in crate::model) fn matrix(&self, name: &str) -> Result<&'a TensorInfo, ModelError> {
        let t = self
            .file
            .tensor(name)
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
        let extra = t.shape.get(2..).unwrap_or(&[]);
        if t.shape.len() < 2 || extra.iter().any(|&d| d != 1) {
            return Err(ModelError::Contradiction(format!(
                "{name} has shape {:?}; a matrix has two dimensions",
                t.shape
            )));
        }
        Ok(t)
    }

    /// A stack of expert matrices: three dimensions (`[cols, rows, experts]`).
    pub(in crate::model) fn experts(&self, name: &str) -> Result<&'a TensorInfo, ModelError> {
        let t = self
            .file
            .tensor(name)
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
        if t.shape.len() != 3 {
            return Err(ModelError::Contradiction(format!(
                "{name} has shape {:?}; a stack of experts has three dimensions",
                t.shape
            )));
        }
        Ok(t)
    }

    /// Dimension `axis` of `t` as a size; `what` names it in the error.
    pub(in crate::model) fn dim(
        &self,
        t: &TensorInfo,
        axis: usize,
        what: &str,
    ) -> Result<usize, ModelError> {
        let d = t.shape.get(axis).copied().unwrap_or(1);
        if d > MAX_SIZE {
            return Err(ModelError::Contradiction(format!(
                "{what} taken from {} shape {:?} is more than {MAX_SIZE}",
                t.name, t.shape
            )));
        }
        Ok(d as usize)
    }

    /// `value` (named by `what`) when dimension `axis` of `t` agrees.
    pub(in crate::model) fn expect(
        &self,
        t: &TensorInfo,
        axis: usize,
        value: usize,
        what: impl FnOnce() -> String,
    ) -> Result<usize, ModelError> {
        if t.shape.get(axis) == Some(&(value as u64)) {
            return Ok(value);
        }
        Err(ModelError::Contradiction(format!(
            "{} is {value} but {} has shape {:?}",
            what(),
            t.name,
            t.shape
        )))
    }

    /// The row count of first-layer weight `name`, which reads rows of
    /// `n_embd` values, checked against `value` (named by `what`). The key
    /// is blamed only when the tensor is otherwise sound: a missing tensor,
    /// or one whose rows are not `n_embd` long, is the weights loader's to
    /// report, by the tensor's name.
    pub(super) fn expect_rows(
        &self,
        name: &str,
        n_embd: usize,
        value: usize,
        what: impl FnOnce() -> String,
    ) -> Result<usize, ModelError> {
        match self.file.tensor(name) {
            Some(t) if t.shape.first() == Some(&(n_embd as u64)) => self.expect(t, 1, value, what),
            _ => Ok(value),
        }
    }
}
