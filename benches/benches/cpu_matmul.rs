//! Single-thread CPU matmul kernels (`quant_dot::matmul_tile`) for every
//! weight type the backend supports.
//!
//! - `cpu/matvec/<type>/<k>x<rows>`: one token (decode) against weights
//!   that come from DRAM, as in a real model whose layers are far larger
//!   than the caches. Shapes are named as ggml names tensors, `ne0 x ne1` =
//!   row length x row count, so 4096x11008 is llama-7B's `ffn_up`: 11008
//!   rows of 4096 weights. Throughput is the weight bytes streamed per call,
//!   the figure to hold against memory bandwidth (`cpu/read_bandwidth`).
//! - `cpu/matvec_hot/<type>/4096x4096`: the same matrix every call, so what
//!   fits in the last-level cache is read from there: the kernel's own
//!   ceiling rather than memory's.
//! - `cpu/prefill_flop/<type>/<k>x<rows>/<n>tok`: a prompt of 512 tokens.
//!   Criterion's "elements" are FLOP here (2 x k x rows x tokens), so
//!   "Gelem/s" reads GFLOP/s. One prompt takes 0.1-1 s on one thread, so each
//!   type costs a few seconds.
//!
//! `Q4_0x8` is Q4_0 repacked eight rows at a time, the layout the backend
//! actually runs Q4_0 matrices in on AVX2 machines (`quant_dot::q4_0x8`);
//! plain `Q4_0` is the file-order kernel it replaces.
//!
//! A decode benchmark passes the whole matrix to one `matmul_tile` call (the
//! number of rows per call makes no measurable difference there). A prefill
//! benchmark calls it per [`PREFILL_ROWS_PER_CALL`] rows.

use std::hint::black_box;

use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use rocmforge_benches::inputs::{activations, WeightMatrix, KERNEL_TYPES};
use rocmforge_core::quant::QuantType;
use rocmforge_cpu::kernels::quant_dot::{matmul_tile, q4_0x8};

/// Row length of every benchmarked matrix (a 7B model's hidden size).
const K: usize = 4096;
/// Rows of the decode matrices: attention projections and the FFN.
const MATVEC_ROWS: [usize; 2] = [4096, 11008];
const PREFILL_ROWS: usize = 4096;
const PREFILL_TOKENS: usize = 512;
/// Rows per prefill call: the executor's chunk for this matrix on two
/// threads (rows / (threads x 4)). Whole-matrix calls would double the F16
/// and F32 times (685 vs 353 ms for F16 with 32-row calls, 2026-11-21): the
/// float kernels then re-read every row from L3 or DRAM for each group of
/// tokens, instead of from L2.
const PREFILL_ROWS_PER_CALL: usize = 512;

fn matrix(ty: QuantType, rows: usize) -> WeightMatrix {
    WeightMatrix::random(ty, K, rows).expect("every kernel type has a quantizer")
}

/// Weight bytes a cold matvec cycles through: copies of the matrix are
/// visited in turn, so each call finds its copy evicted from any last-level
/// cache smaller than this.
const COLD_BYTES: usize = 256 << 20;

fn matvec(c: &mut Criterion) {
    let mut group = c.benchmark_group("cpu/matvec");
    for ty in KERNEL_TYPES {
        let act = activations(ty, K, 1);
        for rows in MATVEC_ROWS {
            let bytes = WeightMatrix::byte_len(ty, K, rows).expect("4096 is whole blocks");
            group.throughput(Throughput::BytesDecimal(bytes));
            // Built on first use, so a filtered-out benchmark costs nothing,
            // and dropped after its benchmark to bound memory.
            let mut copies = None;
            let mut next = 0;
            let mut out = vec![0.0f32; rows];
            let id = BenchmarkId::new(ty.name(), format!("{K}x{rows}"));
            group.bench_function(id, |b| {
                let copies: &Vec<Vec<u8>> = copies.get_or_insert_with(|| {
                    let w = matrix(ty, rows).bytes;
                    vec![w; COLD_BYTES.div_ceil(bytes as usize)]
                });
                b.iter(|| {
                    next = (next + 1) % copies.len();
                    matmul_tile(ty, K, &copies[next], 0..rows, black_box(&act), 1, &mut out)
                });
            });
        }
    }
    group.finish();
}

fn matvec_hot(c: &mut Criterion) {
    let mut group = c.benchmark_group("cpu/matvec_hot");
    let rows = 4096;
    for ty in KERNEL_TYPES {
        let act = activations(ty, K, 1);
        let bytes = WeightMatrix::byte_len(ty, K, rows).expect("4096 is whole blocks");
        group.throughput(Throughput::BytesDecimal(bytes));
        let mut w = None;
        let mut out = vec![0.0f32; rows];
        let id = BenchmarkId::new(ty.name(), format!("{K}x{rows}"));
        group.bench_function(id, |b| {
            let w = w.get_or_insert_with(|| matrix(ty, rows));
            b.iter(|| matmul_tile(ty, K, &w.bytes, 0..rows, black_box(&act), 1, &mut out));
        });
    }
    group.finish();
}

fn prefill(c: &mut Criterion) {
    let mut group = c.benchmark_group("cpu/prefill_flop");
    // Criterion's default linear sampling would run 55 calls at least.
    group.sampling_mode(SamplingMode::Flat);
    let flop = 2 * K * PREFILL_ROWS * PREFILL_TOKENS;
    group.throughput(Throughput::Elements(flop as u64));
    for ty in KERNEL_TYPES {
        let mut inputs = None;
        let mut out = vec![0.0f32; PREFILL_TOKENS * PREFILL_ROWS_PER_CALL];
        let id = BenchmarkId::new(ty.name(), format!("{K}x{PREFILL_ROWS}/{PREFILL_TOKENS}tok"));
        group.bench_function(id, |b| {
            let (w, acts) = inputs.get_or_insert_with(|| {
                (matrix(ty, PREFILL_ROWS), activations(ty, K, PREFILL_TOKENS))
            });
            b.iter(|| {
                for r0 in (0..PREFILL_ROWS).step_by(PREFILL_ROWS_PER_CALL) {
                    let rows = r0..(r0 + PREFILL_ROWS_PER_CALL).min(PREFILL_ROWS);
                    let out = &mut out[..rows.len() * PREFILL_TOKENS];
                    matmul_tile(ty, K, &w.bytes, rows, black_box(acts), PREFILL_TOKENS, out);
                }
            });
        });
    }
    group.finish();
}

/// Q4_0 in the interleaved layout, in the three shapes above.
fn interleaved_q4_0(c: &mut Criterion) {
    let ty = QuantType::Q4_0;
    let packed = |rows: usize| {
        let w = matrix(ty, rows).bytes;
        let mut out = vec![0; w.len()];
        q4_0x8::pack(&w, rows, K, &mut out);
        out
    };
    let run = |w: &[u8], acts: &[u8], n: usize, rows: std::ops::Range<usize>, out: &mut [f32]| {
        let stride = rows.len();
        assert!(out.len() >= n * stride);
        // SAFETY: `out` holds n rows of `stride` floats.
        unsafe { q4_0x8::matmul_rows_strided(K, w, rows, acts, n, out.as_mut_ptr(), stride) };
    };
    if !q4_0x8::can_pack(ty, 8, K) {
        return;
    }
    let act = activations(ty, K, 1);
    let mut group = c.benchmark_group("cpu/matvec");
    for rows in MATVEC_ROWS {
        let bytes = WeightMatrix::byte_len(ty, K, rows).expect("4096 is whole blocks");
        group.throughput(Throughput::BytesDecimal(bytes));
        let (mut copies, mut next, mut out) = (None, 0, vec![0.0f32; rows]);
        group.bench_function(BenchmarkId::new("Q4_0x8", format!("{K}x{rows}")), |b| {
            let copies: &Vec<Vec<u8>> = copies
                .get_or_insert_with(|| vec![packed(rows); COLD_BYTES.div_ceil(bytes as usize)]);
            b.iter(|| {
                next = (next + 1) % copies.len();
                run(&copies[next], black_box(&act), 1, 0..rows, &mut out)
            });
        });
    }
    group.finish();

    let mut group = c.benchmark_group("cpu/matvec_hot");
    let rows = 4096;
    let bytes = WeightMatrix::byte_len(ty, K, rows).expect("4096 is whole blocks");
    group.throughput(Throughput::BytesDecimal(bytes));
    let (mut w, mut out) = (None, vec![0.0f32; rows]);
    group.bench_function(BenchmarkId::new("Q4_0x8", format!("{K}x{rows}")), |b| {
        let w = w.get_or_insert_with(|| packed(rows));
        b.iter(|| run(w, black_box(&act), 1, 0..rows, &mut out));
    });
    group.finish();

    let mut group = c.benchmark_group("cpu/prefill_flop");
    group.sampling_mode(SamplingMode::Flat);
    group.throughput(Throughput::Elements(
        (2 * K * PREFILL_ROWS * PREFILL_TOKENS) as u64,
    ));
    let mut inputs = None;
    let mut out = vec![0.0f32; PREFILL_TOKENS * PREFILL_ROWS_PER_CALL];
    let id = BenchmarkId::new("Q4_0x8", format!("{K}x{PREFILL_ROWS}/{PREFILL_TOKENS}tok"));
    group.bench_function(id, |b| {
        let (w, acts) = inputs
            .get_or_insert_with(|| (packed(PREFILL_ROWS), activations(ty, K, PREFILL_TOKENS)));
        b.iter(|| {
            for r0 in (0..PREFILL_ROWS).step_by(PREFILL_ROWS_PER_CALL) {
                let rows = r0..(r0 + PREFILL_ROWS_PER_CALL).min(PREFILL_ROWS);
                // Each call's output block is its own rows x tokens.
                run(w, black_box(acts), PREFILL_TOKENS, rows, &mut out);
            }
        });
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = rocmforge_benches::criterion();
    targets = matvec, matvec_hot, prefill, interleaved_q4_0
}
criterion_main!(benches);
