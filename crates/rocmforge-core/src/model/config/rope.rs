//! The RoPE keys every family reads, with llama.cpp's defaults: the base,
//! linear or YaRN position scaling, and the base of sliding-window layers.
//! A family that reads more (Mistral 3's YaRN ramp) or shares them
//! differently (gpt-oss's local layers) says so in its module.

use super::super::ModelError;
use super::keys::{Keys, POSITIVE};

/// RoPE as every family reads it.
pub(super) struct Rope {
    pub freq_base: f32,
    pub freq_scale: f32,
    /// The original context YaRN extends, when YaRN applies.
    pub yarn_orig_ctx: Option<usize>,
    pub attn_factor: f32,
    /// Base and scale of the sliding-window layers: `rope.freq_base_swa`
    /// (default 10000), never scaled. This is Gemma 3's rule; it matters
    /// only to a family with local layers, and gpt-oss replaces it with
    /// llama.cpp's general one (the global base and scale).
    pub freq_base_local: f32,
    pub freq_scale_local: f32,
}

impl Rope {
    pub(super) fn read(keys: &Keys, n_ctx_train: usize) -> Result<Rope, ModelError> {
        let freq_base = keys
            .float("rope.freq_base", POSITIVE, |v| v > 0.0)?
            .unwrap_or(10000.0);
        let (freq_scale, yarn) = scaling(keys)?;
        // llama.cpp: the context YaRN extends defaults to the trained one.
        let yarn_orig_ctx = match yarn {
            true => Some(
                keys.ranged("rope.scaling.original_context_length", 1, u32::MAX.into())?
                    .unwrap_or(n_ctx_train),
            ),
            false => None,
        };
        let attn_factor = keys
            .float("rope.scaling.attn_factor", POSITIVE, |v| v > 0.0)?
            .unwrap_or(1.0);
        let base_swa = keys.float("rope.freq_base_swa", POSITIVE, |v| v > 0.0)?;
        Ok(Rope {
            freq_base,
            freq_scale,
            yarn_orig_ctx,
            attn_factor,
            freq_base_local: base_swa.unwrap_or(10000.0),
            freq_scale_local: 1.0,
        })
    }
}

/// llama.cpp's rule: the scale is 1 / `rope.scaling.factor` (or the older
/// `rope.scale_linear`), a factor of 0 meaning none, and a scaling type of
/// `none` turning it off. Returns the scale and whether YaRN applies.
/// Linear and YaRN scaling are computed here; LongRoPE with a real factor
/// would silently give wrong output, so it is refused.
fn scaling(keys: &Keys) -> Result<(f32, bool), ModelError> {
    let kind = match keys.value("rope.scaling.type") {
        (_, None) => "linear",
        (key, Some(v)) => v.as_str().ok_or_else(|| ModelError::BadKey {
            key,
            reason: format!("should be a string, found {}", v.brief()),
        })?,
    };
    if !matches!(kind, "none" | "linear" | "yarn" | "longrope") {
        return Err(ModelError::BadValue {
            key: keys.name("rope.scaling.type"),
            value: format!("{kind:?}"),
            expected: "one of none, linear, yarn or longrope".into(),
        });
    }
    let factor_ok = "zero (no scaling) or a positive finite number";
    let factor = match keys.float("rope.scaling.factor", factor_ok, |v| v >= 0.0)? {
        Some(f) => Some(("rope.scaling.factor", f)),
        None => keys
            .float("rope.scale_linear", factor_ok, |v| v >= 0.0)?
            .map(|f| ("rope.scale_linear", f)),
    };
    let Some((factor_key, factor)) = factor.filter(|&(_, f)| f != 0.0) else {
        return Ok((1.0, false));
    };
    let scale = 1.0 / factor;
    if kind == "none" || scale == 1.0 {
        // A factor of 1 scales nothing, whatever the method (YaRN's mixing
        // and magnitude both reduce to nothing at scale 1).
        return Ok((1.0, false));
    }
    if !scale.is_finite() {
        return Err(ModelError::BadValue {
            key: keys.name(factor_key),
            value: format!("{factor:?}"),
            expected: "large enough that its inverse is a finite f32".into(),
        });
    }
    if kind == "longrope" {
        return Err(ModelError::Unsupported {
            key: keys.name("rope.scaling.type"),
            value: format!("{kind:?}"),
            feature: "LongRoPE scaling".into(),
        });
    }
    Ok((scale, kind == "yarn"))
}
