//! Single-thread CPU kernels around the matmuls: RMSNorm, RoPE, SwiGLU and
//! decode attention, at llama-7B-like sizes (hidden 4096, 32 heads of 128).
//! Throughput is the bytes each call reads:
//!
//! - `cpu/rms_norm/512x4096`: 512 rows of 4096 f32 (the 16 KiB weight
//!   vector, re-read from L1 for every row, is not counted).
//! - `cpu/rope/<mode>/32x128/512pos`: one Q row of 32 heads x 128 f32 at
//!   each of positions 0..512, rotated in place.
//! - `cpu/silu_mul/512x11008`: gate and up, 512 rows of 11008 f32 each.
//! - `cpu/attention/ctx<n>`: one decode token, 32 query heads over an f16
//!   KV cache of 8 heads (GQA, as llama-3-8B), all 32 `attend_head` calls.
//!   Counted: K and V rows read by every call; four query heads share each
//!   KV head, so only a quarter of that is distinct cache memory.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rocmforge_benches::inputs::{f16_noise, noise};
use rocmforge_cpu::kernels::activation::silu_mul;
use rocmforge_cpu::kernels::attention::{attend_head, KvHead};
use rocmforge_cpu::kernels::norm::rms_norm;
use rocmforge_cpu::kernels::rope::{RopeMode, RopeTable};

const HIDDEN: usize = 4096;
const FFN: usize = 11008;
const N_HEAD: usize = 32;
const N_KV_HEAD: usize = 8;
const HEAD_DIM: usize = 128;
const TOKENS: usize = 512;
const F32: u64 = 4;
const F16: u64 = 2;

fn norm(c: &mut Criterion) {
    let mut group = c.benchmark_group("cpu/rms_norm");
    group.throughput(Throughput::BytesDecimal((TOKENS * HIDDEN) as u64 * F32));
    let x = noise(TOKENS * HIDDEN, 1);
    let weight = noise(HIDDEN, 2);
    let mut out = vec![0.0f32; TOKENS * HIDDEN];
    group.bench_function(format!("{TOKENS}x{HIDDEN}"), |b| {
        b.iter(|| {
            for (xr, or) in x.chunks_exact(HIDDEN).zip(out.chunks_exact_mut(HIDDEN)) {
                rms_norm(black_box(xr), &weight, 1e-5, or);
            }
        })
    });
    group.finish();
}

fn rope(c: &mut Criterion) {
    let mut group = c.benchmark_group("cpu/rope");
    group.throughput(Throughput::BytesDecimal((TOKENS * HIDDEN) as u64 * F32));
    for (name, mode) in [("normal", RopeMode::Normal), ("neox", RopeMode::NeoX)] {
        let table = RopeTable::new(mode, HEAD_DIM, 10_000.0, 1.0, None);
        // Rotating again and again keeps the values' norms, so no reset.
        let mut q = noise(TOKENS * HIDDEN, 3);
        let id = BenchmarkId::new(name, format!("{N_HEAD}x{HEAD_DIM}/{TOKENS}pos"));
        group.bench_function(id, |b| {
            b.iter(|| {
                for (pos, row) in q.chunks_exact_mut(HIDDEN).enumerate() {
                    table.apply(black_box(row), N_HEAD, HEAD_DIM, pos);
                }
            })
        });
    }
    group.finish();
}

fn swiglu(c: &mut Criterion) {
    let mut group = c.benchmark_group("cpu/silu_mul");
    group.throughput(Throughput::BytesDecimal(2 * (TOKENS * FFN) as u64 * F32));
    let gate = noise(TOKENS * FFN, 4);
    let up = noise(TOKENS * FFN, 5);
    let mut out = vec![0.0f32; TOKENS * FFN];
    group.bench_function(format!("{TOKENS}x{FFN}"), |b| {
        b.iter(|| silu_mul(black_box(&gate), &up, &mut out))
    });
    group.finish();
}

fn attention(c: &mut Criterion) {
    let mut group = c.benchmark_group("cpu/attention");
    let kv_stride = N_KV_HEAD * HEAD_DIM;
    let group_size = N_HEAD / N_KV_HEAD;
    let scale = 1.0 / (HEAD_DIM as f32).sqrt();
    for n_kv in [512, 4096] {
        let read = 2 * (N_HEAD * n_kv * HEAD_DIM) as u64 * F16;
        group.throughput(Throughput::BytesDecimal(read));
        let k_cache = f16_noise(n_kv * kv_stride, 6);
        let v_cache = f16_noise(n_kv * kv_stride, 7);
        let q = noise(N_HEAD * HEAD_DIM, 8);
        let mut out = vec![0.0f32; N_HEAD * HEAD_DIM];
        let mut scratch = vec![0.0f32; HEAD_DIM + n_kv];
        group.bench_function(format!("ctx{n_kv}"), |b| {
            b.iter(|| {
                for h in 0..N_HEAD {
                    let span = h * HEAD_DIM..(h + 1) * HEAD_DIM;
                    let kv = KvHead {
                        k: &k_cache,
                        v: &v_cache,
                        stride: kv_stride,
                        offset: (h / group_size) * HEAD_DIM,
                        ring: usize::MAX,
                    };
                    attend_head(
                        black_box(&q[span.clone()]),
                        &kv,
                        0..n_kv,
                        HEAD_DIM,
                        scale,
                        None,
                        &mut out[span],
                        &mut scratch,
                    );
                }
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = rocmforge_benches::criterion();
    targets = norm, rope, swiglu, attention
}
criterion_main!(benches);
