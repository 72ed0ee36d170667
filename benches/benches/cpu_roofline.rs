//! The memory side of the roofline on this machine: how fast one thread can
//! stream bytes it only reads, from L3 and from DRAM. A decode matvec that
//! reaches the same bytes/s is as fast as memory allows; one below it is
//! bound by its arithmetic.
//!
//! - `cpu/read_bandwidth/<streams>/<size>`: a sum over a `<size>` buffer of
//!   u64, which the compiler vectorizes; 8 MB stays in a 32 MB L3, 512 MB
//!   does not. `1stream` reads it front to back; `4streams` reads its four
//!   quarters side by side, as the matmul kernels read several weight rows
//!   at once. The hardware prefetchers follow each stream, so one core gets
//!   noticeably more from DRAM with several (27 vs 18 GB/s here).

use std::hint::black_box;
use std::slice::ChunksExact;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

/// A reader: the sum of every value of its buffer.
type Reader = fn(&[u64]) -> u64;

fn one_stream(buf: &[u64]) -> u64 {
    buf.iter().fold(0u64, |a, &v| a.wrapping_add(v))
}

fn four_streams(buf: &[u64]) -> u64 {
    fn lanes(s: &[u64]) -> ChunksExact<'_, u64> {
        s.chunks_exact(8)
    }
    let n = buf.len() / 4;
    let (a, rest) = buf.split_at(n);
    let (b, rest) = rest.split_at(n);
    let (c, d) = rest.split_at(n);
    let mut acc = [0u64; 8];
    for (((a, b), c), d) in lanes(a).zip(lanes(b)).zip(lanes(c)).zip(lanes(d)) {
        for j in 0..8 {
            acc[j] = acc[j]
                .wrapping_add(a[j])
                .wrapping_add(b[j])
                .wrapping_add(c[j])
                .wrapping_add(d[j]);
        }
    }
    acc.iter().fold(0, |s, &v| s.wrapping_add(v))
}

fn read_bandwidth(c: &mut Criterion) {
    let mut group = c.benchmark_group("cpu/read_bandwidth");
    for mb in [8, 512] {
        let bytes = mb * 1_000_000;
        group.throughput(Throughput::BytesDecimal(bytes as u64));
        // Filled on first use, so a filtered-out run allocates nothing.
        let mut buf = None;
        let readers: [(&str, Reader); 2] = [("1stream", one_stream), ("4streams", four_streams)];
        for (name, sum) in readers {
            group.bench_function(format!("{name}/{mb}MB"), |b| {
                let buf = buf.get_or_insert_with(|| vec![1u64; bytes / 8]);
                // Every value is 1: a reader that skipped some (a length
                // not divisible into its streams) would count too few bytes.
                assert_eq!(sum(buf), buf.len() as u64, "{name} skipped values");
                b.iter(|| sum(black_box(buf)))
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = rocmforge_benches::criterion();
    targets = read_bandwidth
}
criterion_main!(benches);
