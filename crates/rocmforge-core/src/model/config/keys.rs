//! The one table of metadata keys the loader reads, and typed access to
//! them whose errors name the key.
//!
//! Every family reads its `{arch}.*` keys through [`Keys`], by their suffix
//! in [`ARCH_KEYS`]; a debug assertion trips on a suffix missing from the
//! table, so the metadata sweep test (`crates/rocmforge/tests/
//! metadata_sweep.rs`), which tries bad values for every listed key, cannot
//! miss one.

use crate::gguf::{GgufFile, GgufValue};

use super::super::ModelError;

/// The `{arch}.*` keys the loader reads, without the `{arch}.` prefix. Kept
/// in one list so that the metadata sweep test (`crates/rocmforge/tests/
/// metadata_sweep.rs`) can try bad values for each; reading a key missing
/// from it trips a debug assertion. Which family reads a key is told where
/// it is read: `dims` and `rope` for every family, the family's module
/// (`family/*.rs`) for its own, and `moe.rs` for the `expert_*` keys.
pub const ARCH_KEYS: &[&str] = &[
    "context_length",
    "embedding_length",
    "block_count",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.layer_norm_rms_epsilon",
    "rope.dimension_count",
    "rope.freq_base",
    "rope.scaling.type",
    "rope.scaling.factor",
    "rope.scaling.original_context_length",
    "rope.scaling.attn_factor",
    "rope.scaling.yarn_beta_fast",
    "rope.scaling.yarn_beta_slow",
    "rope.scaling.yarn_log_multiplier",
    "attention.temperature_scale",
    "rope.scale_linear",
    "vocab_size",
    "expert_count",
    "expert_used_count",
    "expert_feed_forward_length",
    "expert_shared_feed_forward_length",
    "attention.sliding_window",
    "attention.sliding_window_pattern",
    "rope.freq_base_swa",
    "final_logit_softcapping",
];

/// Keys outside `{arch}.*` that loading a model reads: the architecture, and
/// the token list, whose length must match the embedding table.
pub const GENERAL_KEYS: &[&str] = &[ARCH_KEY, TOKENS_KEY];

pub(super) const ARCH_KEY: &str = "general.architecture";
pub(super) const TOKENS_KEY: &str = "tokenizer.ggml.tokens";

/// Largest size (embedding width, vocabulary, heads, ...) accepted. Far above
/// any real model, and low enough that products of two sizes cannot overflow.
pub(super) const MAX_SIZE: u64 = 1 << 24;

/// Typed access to `{arch}.*` keys with errors that name the key.
pub(in crate::model) struct Keys<'a> {
    pub(super) file: &'a GgufFile,
    pub(super) arch: &'a str,
}

impl Keys<'_> {
    pub(in crate::model) fn name(&self, suffix: &str) -> String {
        format!("{}.{}", self.arch, suffix)
    }

    pub(in crate::model) fn missing(&self, suffix: &str) -> ModelError {
        ModelError::MissingKey(self.name(suffix))
    }

    pub(super) fn value(&self, suffix: &str) -> (String, Option<&GgufValue>) {
        debug_assert!(
            ARCH_KEYS.contains(&suffix),
            "{suffix} is read but missing from ARCH_KEYS, so no test sweeps it"
        );
        let key = self.name(suffix);
        let v = self.file.get(&key);
        (key, v)
    }

    /// An integer in `min..=MAX_SIZE`, of any integer type.
    pub(in crate::model) fn size(
        &self,
        suffix: &str,
        min: u64,
    ) -> Result<Option<usize>, ModelError> {
        self.ranged(suffix, min, MAX_SIZE)
    }

    pub(in crate::model) fn ranged(
        &self,
        suffix: &str,
        min: u64,
        max: u64,
    ) -> Result<Option<usize>, ModelError> {
        match self.value(suffix) {
            (_, None) => Ok(None),
            (key, Some(v)) => int_value(&key, v, min, max).map(Some),
        }
    }

    /// Like [`Self::size`], or an array of one such value per layer, which
    /// llama.cpp accepts for head counts and feed-forward sizes. This graph
    /// has one shape for every layer, so the values must all be equal.
    pub(in crate::model) fn per_layer_size(
        &self,
        suffix: &str,
        min: u64,
        n_layer: usize,
    ) -> Result<Option<usize>, ModelError> {
        let (key, items) = match self.value(suffix) {
            (_, None) => return Ok(None),
            (key, Some(GgufValue::Array(items))) => (key, items),
            (key, Some(v)) => return int_value(&key, v, min, MAX_SIZE).map(Some),
        };
        if items.len() != n_layer {
            return Err(ModelError::BadKey {
                reason: format!(
                    "is an array of {} values, but a per-layer array needs one per block ({n_layer})",
                    items.len()
                ),
                key,
            });
        }
        let sizes = items
            .iter()
            .map(|v| int_value(&key, v, min, MAX_SIZE))
            .collect::<Result<Vec<_>, _>>()?;
        if sizes.iter().any(|&s| s != sizes[0]) {
            return Err(ModelError::Unsupported {
                key,
                value: format!("{sizes:?}"),
                feature: "layers of different sizes".into(),
            });
        }
        Ok(sizes.first().copied())
    }

    /// Which layers use the sliding window: `attention.sliding_window_pattern`
    /// as one period `n` (layer `i` is local unless `i % n == n - 1`), or
    /// as an array of one bool per layer; `default` period when absent.
    pub(super) fn local_layers(
        &self,
        n_layer: usize,
        default: usize,
    ) -> Result<Vec<bool>, ModelError> {
        let period = match self.value("attention.sliding_window_pattern") {
            (_, None) => default,
            (key, Some(GgufValue::Array(items))) => {
                let flags: Option<Vec<bool>> = items.iter().map(GgufValue::as_bool).collect();
                return match flags {
                    Some(f) if f.len() == n_layer => Ok(f),
                    _ => Err(ModelError::BadKey {
                        key,
                        reason: format!("should be one bool per block ({n_layer})"),
                    }),
                };
            }
            (key, Some(v)) => int_value(&key, v, 0, MAX_SIZE)?,
        };
        // llama.cpp: a period of 0 makes every layer local.
        Ok((0..n_layer)
            .map(|i| period == 0 || i % period < period - 1)
            .collect())
    }

    /// A finite number (f32, f64, or an integer, which some converters
    /// write) for which `valid` holds; `expected` says what that is.
    pub(super) fn float(
        &self,
        suffix: &str,
        expected: &str,
        valid: impl Fn(f32) -> bool,
    ) -> Result<Option<f32>, ModelError> {
        let (key, v) = match self.value(suffix) {
            (_, None) => return Ok(None),
            (key, Some(v)) => (key, v),
        };
        let f = v.as_f32().ok_or_else(|| ModelError::BadKey {
            key: key.clone(),
            reason: format!("should be a number, found {}", v.brief()),
        })?;
        // An f64 or u64 beyond f32's range converts to infinity.
        if f.is_finite() && valid(f) {
            Ok(Some(f))
        } else {
            Err(ModelError::BadValue {
                key,
                value: v.brief(),
                expected: expected.into(),
            })
        }
    }
}

/// What [`Keys::float`] accepts for most keys.
pub(super) const POSITIVE: &str = "a positive finite number";
pub(super) const FINITE: &str = "a finite number";

/// `v` as an integer in `min..=max`; any integer type is accepted, since
/// converters disagree on u32, i32 and u64.
fn int_value(key: &str, v: &GgufValue, min: u64, max: u64) -> Result<usize, ModelError> {
    let bad = |value: String, expected: String| ModelError::BadValue {
        key: key.to_string(),
        value,
        expected,
    };
    match (v.as_u64(), v.as_i64()) {
        (Some(n), _) if n < min => Err(bad(n.to_string(), format!("at least {min}"))),
        (Some(n), _) if n > max => Err(bad(n.to_string(), format!("at most {max}"))),
        (Some(n), _) => Ok(n as usize),
        // Negative: a converter's -1 for "unset", or a u32 read as i32.
        (None, Some(n)) => Err(bad(n.to_string(), format!("at least {min}"))),
        (None, None) => Err(ModelError::BadKey {
            key: key.to_string(),
            reason: format!("should be an integer, found {}", v.brief()),
        }),
    }
}
