//! Mixture-of-experts routing and combining, as llama.cpp's `build_moe_ffn`
//! computes them with softmax gating.

use rocmforge_core::model::moe::MAX_EXPERTS_USED;

use super::activation::softmax_inplace;

/// The smallest sum of chosen weights divided by (ggml clamps it so a row of
/// vanishing probabilities does not divide by zero).
const MIN_WEIGHT_SUM: f32 = 6.103_515_6e-5;

/// Routes one token: softmax over `logits` (one per expert, overwritten by
/// the probabilities), then the `ids.len()` most probable experts, best
/// first (the lower index first among equals), into `ids` and their
/// probabilities into `weights`, divided by their sum when `normalize`.
pub fn route(logits: &mut [f32], ids: &mut [f32], weights: &mut [f32], normalize: bool) {
    let k = ids.len();
    assert!(
        k <= logits.len().min(MAX_EXPERTS_USED) && weights.len() == k,
        "{k} choices of {} experts",
        logits.len()
    );
    softmax_inplace(logits);
    // k is small (2..8 of 8..128 experts): k passes over the row beat a sort.
    let mut chosen = [usize::MAX; MAX_EXPERTS_USED];
    let chosen = &mut chosen[..k];
    for slot in 0..k {
        let mut best = usize::MAX;
        for (e, &p) in logits.iter().enumerate() {
            if chosen[..slot].contains(&e) {
                continue;
            }
            if best == usize::MAX || p > logits[best] {
                best = e;
            }
        }
        chosen[slot] = best;
        ids[slot] = best as f32;
        weights[slot] = logits[best];
    }
    if normalize {
        // ggml sums the row in order, clamps, then divides each weight.
        let sum = weights.iter().sum::<f32>().max(MIN_WEIGHT_SUM);
        for w in weights.iter_mut() {
            *w /= sum;
        }
    }
}

/// `out = sum over j of weights[j] * rows[j]`, each product rounded before
/// it is added, in order of `j` (ggml multiplies, then adds the views).
pub fn weighted_sum(rows: &[f32], weights: &[f32], out: &mut [f32]) {
    let n = out.len();
    assert_eq!(rows.len(), n * weights.len(), "rows of {n} per weight");
    for (i, o) in out.iter_mut().enumerate() {
        let mut acc = rows[i] * weights[0];
        for (j, &w) in weights.iter().enumerate().skip(1) {
            acc += rows[j * n + i] * w;
        }
        *o = acc;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_to_the_most_probable_experts_in_order() {
        let mut logits = vec![0.5, 3.0, -1.0, 2.0, 3.0];
        let (mut ids, mut w) = (vec![0.0; 3], vec![0.0; 3]);
        route(&mut logits, &mut ids, &mut w, false);
        // Ties go to the lower index.
        assert_eq!(ids, [1.0, 4.0, 3.0]);
        let e = [0.5f32, 3.0, -1.0, 2.0, 3.0].map(|v| (v - 3.0f32).exp());
        let total: f32 = e.iter().sum();
        for (w, i) in w.iter().zip([1, 4, 3]) {
            assert!((w - e[i] / total).abs() < 1e-6);
        }

        let mut logits = vec![0.5, 3.0, -1.0, 2.0, 3.0];
        route(&mut logits, &mut ids, &mut w, true);
        assert!((w.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(w[0] == w[1] && w[1] > w[2]);
    }

    #[test]
    fn sums_rows_by_weight() {
        let rows = [1.0, 2.0, 10.0, 20.0, 100.0, 200.0];
        let mut out = [0.0; 2];
        weighted_sum(&rows, &[0.5, 0.25, 0.01], &mut out);
        assert_eq!(out, [0.5 + 2.5 + 1.0, 1.0 + 5.0 + 2.0]);
    }
}
