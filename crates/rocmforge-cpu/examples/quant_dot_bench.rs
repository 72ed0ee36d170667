//! Single-thread throughput of the quantized matmul kernels.
//!
//! `cargo run --release -p rocmforge-cpu --example quant_dot_bench [types...]`
//!
//! Decode: one token against the whole matrix, reported as GB/s of weight
//! bytes streamed (the number to compare with memory bandwidth, printed first).
//! Prefill: 64 tokens, reported as effective GFLOP/s (2 * k * rows * tokens).
//! Both walk the matrix in the executor's 32-row tiles; times are the best of
//! many runs, since the machine may be shared. 4096 x 4096 fits in a 32 MiB
//! L3; 4096 x 14336 mostly does not.

use std::hint::black_box;
use std::time::{Duration, Instant};

use rocmforge_core::quant::{quantize_to_vec, QuantType};
use rocmforge_cpu::kernels::quant_dot::{matmul_tile, quantize_activation};

fn random(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / 16_777_216.0) * 2.0 - 1.0
        })
        .collect()
}

/// Seconds per call of `f`: the best of many short runs, since the machine may
/// be shared and only undisturbed runs measure the kernel.
fn time(total: Duration, mut f: impl FnMut()) -> f64 {
    f();
    let (start, mut best) = (Instant::now(), f64::MAX);
    while start.elapsed() < total {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    best
}

fn read_bandwidth() -> f64 {
    let buf = vec![1u64; 64 << 20]; // 512 MiB, far beyond the caches
    let secs = time(Duration::from_millis(1500), || {
        black_box(buf.iter().fold(0u64, |a, &v| a.wrapping_add(v)));
    });
    (buf.len() * 8) as f64 / secs / 1e9
}

fn bench(ty: QuantType, k: usize, n_rows: usize) {
    // Quantizing a big matrix row by row is slow; tile one random block of
    // rows to fill it (the kernels do not care about repetition).
    let pattern: Vec<u8> = (0..64)
        .flat_map(|r| quantize_to_vec(ty, &random(r, k)).unwrap())
        .collect();
    let w: Vec<u8> = pattern
        .iter()
        .copied()
        .cycle()
        .take(pattern.len() / 64 * n_rows)
        .collect();
    let tokens = 64;
    let mut acts = Vec::new();
    let mut row = Vec::new();
    for t in 0..tokens {
        quantize_activation(ty, &random(1000 + t, k), &mut row);
        acts.extend_from_slice(&row);
    }
    let mut out = vec![0.0f32; n_rows * tokens as usize];

    // Both in the 32-row tiles the executor uses.
    let mut run = |n_tokens: usize| {
        for r0 in (0..n_rows).step_by(32) {
            let rows = r0..(r0 + 32).min(n_rows);
            let n = rows.len() * n_tokens;
            matmul_tile(ty, k, &w, rows, &acts, n_tokens, &mut out[..n]);
        }
        black_box(&out);
    };
    let decode = time(Duration::from_millis(1500), || run(1));
    let prefill = time(Duration::from_millis(1500), || run(tokens as usize));
    let flops = 2.0 * (k * n_rows) as f64 * tokens as f64;
    println!(
        "{:>6} {k:>5}x{n_rows:<6} decode {:7.3} ms {:6.2} GB/s | prefill x{tokens} {:7.2} ms {:6.1} GFLOP/s",
        ty.name(),
        decode * 1e3,
        w.len() as f64 / decode / 1e9,
        prefill * 1e3,
        flops / prefill / 1e9,
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let types: Vec<QuantType> = if args.is_empty() {
        [
            "Q4_0", "Q8_0", "Q4_K", "Q6_K", "Q5_0", "Q4_1", "Q5_K", "Q3_K", "Q2_K", "IQ4_NL",
            "IQ4_XS", "F16",
        ]
        .iter()
        .map(|n| QuantType::from_name(n).unwrap())
        .collect()
    } else {
        args.iter()
            .map(|n| QuantType::from_name(n).unwrap_or_else(|| panic!("unknown type {n}")))
            .collect()
    };
    println!("single-thread read bandwidth: {:.2} GB/s", read_bandwidth());
    for ty in types {
        bench(ty, 4096, 4096);
        bench(ty, 4096, 14336);
        bench(ty, 896, 151936);
    }
}
