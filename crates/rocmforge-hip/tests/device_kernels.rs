//! Every kernel of `kernels/*.hip` on a real GPU, through `hip-sys`, checked
//! against host references in the CPU backend's numerics (ports of
//! `crates/rocmforge-cpu`'s activation quantizer and RMSNorm, and of its
//! integer dot products).
//!
//! The runtime is the one `ROCMFORGE_HIP_RUNTIME` picks (`hip`, `cuda`, or
//! unset: HIP, then the CUDA driver). With HIP the code object is chosen by
//! the device's `gcnArchName`; with the CUDA driver ("hip via CUDA driver")
//! the embedded PTX for the device's `sm_NN`. Device 0 is used: pick another
//! with `HIP_VISIBLE_DEVICES` / `CUDA_VISIBLE_DEVICES`.
//! `ROCMFORGE_HIP_TEST_MODULE=path` loads that code object or PTX file
//! instead of the embedded one (e.g. a build with `-DRF_FORCE_GENERIC_MMA`).
//!
//! Without a runtime, a device or kernels for it, the test prints one skip
//! line and passes, unless `ROCMFORGE_REQUIRE_HIP_DEVICE=1`, where it fails.
//!
//!     ROCMFORGE_HIP_RUNTIME=cuda ROCMFORGE_REQUIRE_HIP_DEVICE=1 \
//!         cargo test -p rocmforge-hip --test device_kernels
//!
//! The device line and one PASS/FAIL line per check go straight to stderr,
//! so they show without `--nocapture`.
//!
//! Every check can fail: outputs are poisoned before each launch (0xFF
//! bytes, NaN as f32; the bit-exact Q8 checks run a second time over 0x00,
//! since 0xFF is also a valid quant), inputs are fresh draws of a seeded
//! xorshift, and a NaN anywhere fails the relative-error checks. Every wait
//! is bounded: an event recorded after the work, polled against a deadline;
//! nothing calls a blocking synchronize. When a wait expires the test
//! panics and leaks what the GPU may still use (device buffers, the pinned
//! staging buffer, the spin flag), so nothing in use is ever freed.

use std::borrow::Cow;
use std::ffi::{c_void, CStr};
use std::io::Write as _;
use std::ptr;
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use half::f16;
use hip_sys::{DevicePtr, Event, EventStatus, Flavor, HipError, Module, Runtime, Stream};
use rocmforge_hip::code_objects::{self, build_summary};
use rocmforge_hip::{MatmulShape, MatvecShape, QuantizeShape, RmsNormShape, SpinShape};

const REQUIRE_ENV: &str = "ROCMFORGE_REQUIRE_HIP_DEVICE";
const MODULE_ENV: &str = "ROCMFORGE_HIP_TEST_MODULE";
/// How long any one piece of GPU work may take.
const DEADLINE: Duration = Duration::from_secs(10);
/// Pinned staging buffer for every upload and download (chunked through it).
const STAGING_BYTES: usize = 1 << 20;
const SEED: u64 = 0x9E37_79B9_7F4A_7C15;
/// Output fill before a launch: NaN as f32, -1 as i8.
const POISON: u8 = 0xFF;
/// The bit-exact Q8 checks run once per fill: any quant value is a valid
/// i8, so a quant left unwritten passes one of these only by luck, never
/// both.
const Q8_POISONS: [u8; 2] = [0xFF, 0x00];
/// matvec: max |gpu - cpu| / sum |terms| (the harness's bound: only the
/// order of the f32 per-block sums differs).
const MATVEC_BOUND: f64 = 2e-6;
/// matmul: max |gpu - exact| / sum |a * b| (f16 products, f32 sums).
const MATMUL_BOUND: f64 = 1e-5;

/// A line on the real stderr, past the test harness's capture.
macro_rules! say {
    ($($t:tt)*) => {{
        let _ = writeln!(std::io::stderr().lock(), $($t)*);
    }};
}

#[test]
fn kernels_match_the_cpu_reference_on_a_gpu() {
    let Some(gpu) = Gpu::open() else {
        return;
    };
    let mut rng = XorShift(SEED);
    let mut report = Report {
        tag: gpu.tag.clone(),
        passed: 0,
        failures: Vec::new(),
    };

    check_quantize(&gpu, &mut rng, &mut report);
    for (group, n_groups) in [(896, 5), (4096, 3), (128, 7)] {
        check_rmsnorm(&gpu, &mut rng, &mut report, group, n_groups, false);
    }
    for (group, n_groups) in [(896, 5), (4096, 3)] {
        check_rmsnorm(&gpu, &mut rng, &mut report, group, n_groups, true);
    }
    for weights in [Weights::Q4_0, Weights::Q8_0] {
        for (rows, k, tokens, extra) in [
            (37, 4096, 1, false),
            (64, 96, 5, true),
            (33, 11008, 8, true),
        ] {
            check_matvec(&gpu, &mut rng, &mut report, weights, rows, k, tokens, extra);
        }
    }
    for (m, n, k, bias) in [
        (77, 45, 200, true),
        (128, 192, 512, false),
        (16, 16, 16, false),
    ] {
        check_matmul(&gpu, &mut rng, &mut report, m, n, k, bias);
    }
    check_spin(&gpu, &mut report);

    gpu.close();
    say!(
        "device_kernels: [{}] {} passed, {} failed",
        report.tag,
        report.passed,
        report.failures.len()
    );
    assert!(
        report.failures.is_empty(),
        "[{}] kernels differ from the CPU reference:\n{}",
        report.tag,
        report.failures.join("\n")
    );
}

// ---- Checks ------------------------------------------------------------

fn check_quantize(gpu: &Gpu, rng: &mut XorShift, report: &mut Report) {
    let n = 4096 * 3 + 32 * 5;
    let mut x: Vec<f32> = (0..n).map(|_| rng.noise()).collect();
    // Block 2: exact ties (amax 127 makes the inverse scale 1); block 4: all
    // zero (amax 0).
    for i in 0..32 {
        x[64 + i] = i as f32 - 15.5;
        x[128 + i] = 0.0;
    }
    x[64 + 31] = 127.0;
    let want = q8_ref(&x);

    let dx = gpu.upload(&f32_bytes(&x));
    let dq = gpu.alloc(n);
    let ds = gpu.alloc(n / 32 * 8);
    let shape = QuantizeShape::new(n as u32);
    let mut detail = String::new();
    for poison in Q8_POISONS {
        gpu.poison(dq, poison);
        gpu.poison(ds, poison);
        gpu.quantize_q8(dx, dq, ds, shape);
        let got = Q8Packed::read(gpu, dq, ds, n);
        if let Some(d) = q8_diff(&got, &want) {
            detail = format!("after fill 0x{poison:02x}: {d}");
            break;
        }
    }
    let ok = detail.is_empty();
    if ok {
        detail = "bit-exact".into();
    }
    report.check(
        "quantize_q8",
        ok,
        format!("({} blocks, fills 0xff and 0x00: {detail})", n / 32),
    );
    gpu.release();
}

fn check_rmsnorm(
    gpu: &Gpu,
    rng: &mut XorShift,
    report: &mut Report,
    group: usize,
    n_groups: usize,
    q8: bool,
) {
    let n = group * n_groups;
    let x: Vec<f32> = (0..n).map(|_| rng.noise()).collect();
    let w: Vec<f32> = (0..group).map(|_| 1.0 + rng.frand() * 0.5).collect();
    let eps = 1e-6f32;
    let want = rmsnorm_ref(&x, &w, eps);
    let want_q8 = q8.then(|| q8_ref(&want));

    let dx = gpu.upload(&f32_bytes(&x));
    let dw = gpu.upload(&f32_bytes(&w));
    let dout = gpu.alloc(n * 4);
    let (dq, ds) = if q8 {
        (gpu.alloc(n), gpu.alloc(n / 32 * 8))
    } else {
        (Buf::NONE, Buf::NONE)
    };
    let shape = RmsNormShape::new(group as u32, n_groups as u32, eps);
    let mut differ = 0;
    let mut q8_detail = None;
    for poison in Q8_POISONS {
        gpu.poison(dout, poison);
        match &want_q8 {
            Some(want_q8) => {
                gpu.poison(dq, poison);
                gpu.poison(ds, poison);
                gpu.rmsnorm_f32_q8(dx, dw, dout, dq, ds, shape);
                let got = Q8Packed::read(gpu, dq, ds, n);
                if q8_detail.is_none() {
                    q8_detail = q8_diff(&got, want_q8)
                        .map(|d| format!("q8 DIFFERS after fill 0x{poison:02x}: {d}"));
                }
            }
            None => gpu.rmsnorm_f32(dx, dw, dout, shape),
        }
        let got = f32s(&gpu.download(dout));
        differ = differ.max(
            got.iter()
                .zip(&want)
                .filter(|(g, w)| g.to_bits() != w.to_bits())
                .count(),
        );
    }
    let mut detail = format!("group {group} x {n_groups}: {differ}/{n} outputs differ");
    if q8 {
        detail += &format!(
            ", {}",
            q8_detail
                .as_deref()
                .unwrap_or("q8 bit-exact (fills 0xff and 0x00)")
        );
    }
    let name = if q8 { "rmsnorm_f32_q8" } else { "rmsnorm_f32" };
    report.check(
        name,
        differ == 0 && q8_detail.is_none(),
        format!("({detail})"),
    );
    gpu.release();
}

#[allow(clippy::too_many_arguments)]
fn check_matvec(
    gpu: &Gpu,
    rng: &mut XorShift,
    report: &mut Report,
    weights: Weights,
    rows: usize,
    k: usize,
    tokens: usize,
    extra: bool,
) {
    let nb = k / 32;
    let bb = weights.block_bytes();
    // Random quants, then a small positive f16 scale per block.
    let mut w: Vec<u8> = (0..rows * nb * bb).map(|_| rng.next() as u8).collect();
    for block in w.chunks_exact_mut(bb) {
        let d = f16::from_f32(0.001 + (rng.next() % 1000) as f32 * 5e-5);
        block[..2].copy_from_slice(&d.to_bits().to_le_bytes());
    }
    let x: Vec<f32> = (0..tokens * k).map(|_| rng.noise()).collect();
    let xq = q8_ref(&x);
    let bias: Vec<f32> = (0..rows).map(|_| rng.frand()).collect();
    let residual: Vec<f32> = (0..tokens * rows).map(|_| rng.frand() * 4.0).collect();

    let dw = gpu.upload(&w);
    let dxq = gpu.upload(&i8_bytes(&xq.q));
    let dxs = gpu.upload(&f32_bytes(&xq.s));
    let (dbias, dres) = if extra {
        (
            Some(gpu.upload(&f32_bytes(&bias))),
            Some(gpu.upload(&f32_bytes(&residual))),
        )
    } else {
        (None, None)
    };
    let dout = gpu.alloc(tokens * rows * 4);
    gpu.poison(dout, POISON);
    let shape = MatvecShape::new(rows as u32, k as u32, tokens as u32);
    gpu.matvec(weights, dw, dxq, dxs, dbias, dres, dout, shape);
    let got = f32s(&gpu.download(dout));

    // The CPU's order: per block (d_w * d_x) * sum(q_w * q_x) in f32, the
    // blocks summed in order in f32, then + bias, + residual.
    let mut worst = Worst::default();
    let mut equal = 0;
    for t in 0..tokens {
        for r in 0..rows {
            let mut acc = 0.0f32;
            let mut mag = 0.0f64;
            for b in 0..nb {
                let block = &w[(r * nb + b) * bb..(r * nb + b + 1) * bb];
                let dw = f16::from_bits(u16::from_le_bytes([block[0], block[1]])).to_f32();
                let xb = t * nb + b;
                let qx = &xq.q[xb * 32..xb * 32 + 32];
                let sum: i32 = (0..32)
                    .map(|j| weights.quant(block, j) * i32::from(qx[j]))
                    .sum();
                let term = dw * xq.s[2 * xb] * sum as f32;
                acc += term;
                mag += f64::from(term.abs());
            }
            let o = t * rows + r;
            if extra {
                acc += bias[r];
                acc += residual[o];
                mag += f64::from(bias[r].abs()) + f64::from(residual[o].abs());
            }
            worst.add(got[o], f64::from(acc), mag, o);
            if got[o] == acc {
                equal += 1;
            }
        }
    }
    report.check(
        weights.name(),
        worst.err < MATVEC_BOUND,
        format!(
            "(rows {rows} k {k} tokens {tokens}{}: max err {} of sum|terms| (bound {MATVEC_BOUND:.0e}), \
             {equal}/{} equal to CPU order)",
            if extra { " +bias+residual" } else { "" },
            worst.describe(&got),
            tokens * rows
        ),
    );
    gpu.release();
}

fn check_matmul(
    gpu: &Gpu,
    rng: &mut XorShift,
    report: &mut Report,
    m: usize,
    n: usize,
    k: usize,
    with_bias: bool,
) {
    let a: Vec<f16> = (0..m * k).map(|_| f16::from_f32(rng.noise())).collect();
    let b: Vec<f16> = (0..n * k)
        .map(|_| f16::from_f32(rng.frand() * 0.1))
        .collect();
    let bias: Vec<f32> = (0..n).map(|_| rng.frand()).collect();

    let da = gpu.upload(&f16_bytes(&a));
    let db = gpu.upload(&f16_bytes(&b));
    let dbias = with_bias.then(|| gpu.upload(&f32_bytes(&bias)));
    let dc = gpu.alloc(m * n * 4);
    gpu.poison(dc, POISON);
    let shape = MatmulShape::new(m as u32, n as u32, k as u32);
    gpu.matmul_f16(da, db, dbias, dc, shape);
    let got = f32s(&gpu.download(dc));

    let mut worst = Worst::default();
    for i in 0..m {
        for j in 0..n {
            let (mut s, mut mag) = (0.0f64, 0.0f64);
            for q in 0..k {
                let p = f64::from(a[i * k + q].to_f32()) * f64::from(b[j * k + q].to_f32());
                s += p;
                mag += p.abs();
            }
            if with_bias {
                s += f64::from(bias[j]);
                mag += f64::from(bias[j].abs());
            }
            worst.add(got[i * n + j], s, mag, i * n + j);
        }
    }
    report.check(
        "matmul_f16",
        worst.err < MATMUL_BOUND,
        format!(
            "(m {m} n {n} k {k}{}: max err {} of sum|a*b| (bound {MATMUL_BOUND:.0e}))",
            if with_bias { " +bias" } else { "" },
            worst.describe(&got)
        ),
    );
    gpu.release();
}

/// The spinning kernel: a bound stops it after exactly that many polls; the
/// host's flag stops it within a bounded wait, while it stays busy without.
fn check_spin(gpu: &Gpu, report: &mut Report) {
    let flag = PinnedFlag::new(gpu);

    // Bounded, flag clear: exactly `bound` polls. The longer run also
    // measures the poll rate, which sizes the bound of the flag test below
    // so that a kernel that never sees the flag still ends by itself.
    let mut polls_per_s = 0.0f64;
    for bound in [1000u32, 250_000] {
        flag.set(0, 0);
        flag.set(1, 0);
        let start = Instant::now();
        gpu.spin(&flag, SpinShape::new(u64::from(bound)));
        let took = start.elapsed();
        let polls = flag.get(1);
        polls_per_s = f64::from(bound) / took.as_secs_f64().max(1e-6);
        report.check(
            "spin bound",
            polls == bound,
            format!(
                "(bound {bound}: {polls} polls, {:.1} ms)",
                took.as_secs_f64() * 1e3
            ),
        );
    }

    // Unbounded in practice: about a minute of polls at the measured rate.
    let bound = ((polls_per_s * 60.0) as u64).clamp(1 << 24, 1 << 40);
    flag.set(0, 0);
    flag.set(1, 0);
    // SAFETY: `flag` is 8 bytes of pinned host memory the device can reach
    // (see PinnedFlag), alive until the kernel is known to have ended
    // (freed only after the waits below succeed; leaked otherwise).
    unsafe { gpu.launch_spin(&flag, SpinShape::new(bound)) };
    gpu.record();
    std::thread::sleep(Duration::from_millis(300));
    let busy = !gpu.ready();
    flag.set(0, 1);
    let set_at = Instant::now();
    let stopped = gpu.poll_until(set_at + DEADLINE);
    let after_ms = set_at.elapsed().as_secs_f64() * 1e3;
    let mut detail = format!("(busy after 300 ms: {}; ", if busy { "yes" } else { "NO" });
    if stopped {
        let polls = flag.get(1);
        detail +=
            &format!("finished {after_ms:.1} ms after the flag; {polls} polls of bound {bound})");
        report.check(
            "spin",
            busy && polls > 0 && u64::from(polls) < bound,
            detail,
        );
    } else {
        detail += &format!(
            "did NOT finish within {} s of the flag; bound {bound} polls, ~{:.0} s at \
             {polls_per_s:.0} polls/s)",
            DEADLINE.as_secs(),
            bound as f64 / polls_per_s.max(1.0)
        );
        report.check("spin", false, detail);
        // The bound ends it: give it that long (and a margin) before the
        // pinned flag may be freed.
        let grace = Duration::from_secs_f64(bound as f64 / polls_per_s.max(1.0) * 2.0 + 10.0)
            .min(Duration::from_secs(180));
        if !gpu.poll_until(Instant::now() + grace) {
            panic!(
                "spin: the kernel still runs {} s after its flag was set and did not end by its \
                 bound either; the host's write to pinned memory never reached it (leaking its \
                 flag and module)",
                grace.as_secs() + DEADLINE.as_secs()
            );
        }
        say!(
            "device_kernels: spin ended by its bound ({} polls) instead of the flag",
            flag.get(1)
        );
    }
    flag.free(gpu);
}

// ---- Host references (the CPU backend's numerics) ----------------------

/// The xorshift the C harness used: the same seed gives the same inputs.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u32 {
        let mut r = self.0;
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        self.0 = r;
        (r >> 16) as u32
    }

    /// Uniform in [-1, 1).
    fn frand(&mut self) -> f32 {
        ((self.next() & 0xFF_FFFF) as f32 / 16_777_216.0) * 2.0 - 1.0
    }

    /// Activations: uniform in [-3, 3), one in 64 scaled by 40 (outliers).
    fn noise(&mut self) -> f32 {
        let v = self.frand() * 3.0;
        if self.next() & 63 == 0 {
            v * 40.0
        } else {
            v
        }
    }
}

fn f16_round(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

/// The Q8-packed layout (kernels/q8_packed.h): 32 quants per block, and
/// per block (d, s) as two f32 holding f16-rounded values.
struct Q8Packed {
    q: Vec<i8>,
    s: Vec<f32>,
}

impl Q8Packed {
    fn read(gpu: &Gpu, q: Buf, s: Buf, n: usize) -> Q8Packed {
        let q = gpu.download(q)[..n].iter().map(|&b| b as i8).collect();
        let s = f32s(&gpu.download(s)[..n / 32 * 8]);
        Q8Packed { q, s }
    }
}

/// ggml's x86 Q8 quantizer, as crates/rocmforge-cpu's activation.rs
/// (`q8_block_scalar`): d = amax / 127, q = rne(x * (127 / amax)), and
/// s = f16(d * sum(q)) with d unrounded.
fn q8_ref(x: &[f32]) -> Q8Packed {
    let mut q = Vec::with_capacity(x.len());
    let mut s = Vec::with_capacity(x.len() / 16);
    for block in x.chunks_exact(32) {
        let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        let mut sum = 0i32;
        for &v in block {
            let r = (v * id).round_ties_even() as i32;
            sum += r;
            q.push(r as i8);
        }
        s.push(f16_round(d));
        s.push(f16_round(d * sum as f32));
    }
    Q8Packed { q, s }
}

/// The first difference between two Q8-packed buffers, if any.
fn q8_diff(got: &Q8Packed, want: &Q8Packed) -> Option<String> {
    let quants = got.q.iter().zip(&want.q).filter(|(g, w)| g != w).count();
    let scales = got
        .s
        .iter()
        .zip(&want.s)
        .filter(|(g, w)| g.to_bits() != w.to_bits())
        .count();
    if quants == 0 && scales == 0 {
        return None;
    }
    let first_q = got.q.iter().zip(&want.q).position(|(g, w)| g != w);
    let first_s = got
        .s
        .iter()
        .zip(&want.s)
        .position(|(g, w)| g.to_bits() != w.to_bits());
    let mut d = format!("{quants} quants and {scales} scales differ");
    if let Some(i) = first_q {
        d += &format!("; quant {i}: {} vs {}", got.q[i], want.q[i]);
    }
    if let Some(i) = first_s {
        d += &format!("; scale {i}: {:e} vs {:e}", got.s[i], want.s[i]);
    }
    Some(d)
}

/// crates/rocmforge-cpu's norm.rs (as ggml): each square rounded to f32,
/// summed in f64 in order, the mean rounded to f32, then
/// (x * (1 / sqrt(mean + eps))) * w in f32.
fn rmsnorm_ref(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len());
    for g in x.chunks_exact(w.len()) {
        let ss: f64 = g.iter().map(|&v| f64::from(v * v)).sum();
        let mean = (ss / w.len() as f64) as f32;
        let scale = 1.0 / (mean + eps).sqrt();
        out.extend(g.iter().zip(w).map(|(&v, &wi)| v * scale * wi));
    }
    out
}

#[derive(Clone, Copy)]
enum Weights {
    Q4_0,
    Q8_0,
}

impl Weights {
    fn name(self) -> &'static str {
        match self {
            Weights::Q4_0 => "matvec_q4_0",
            Weights::Q8_0 => "matvec_q8_0",
        }
    }

    fn kernel(self) -> &'static CStr {
        match self {
            Weights::Q4_0 => c"matvec_q4_0",
            Weights::Q8_0 => c"matvec_q8_0",
        }
    }

    /// GGUF block bytes: f16 d, then the quants.
    fn block_bytes(self) -> usize {
        match self {
            Weights::Q4_0 => 18,
            Weights::Q8_0 => 34,
        }
    }

    /// Quant j of a block: Q4_0 byte j holds element j (low nibble) and
    /// j + 16 (high), minus 8; Q8_0 a signed byte each.
    fn quant(self, block: &[u8], j: usize) -> i32 {
        match self {
            Weights::Q4_0 if j < 16 => i32::from(block[2 + j] & 15) - 8,
            Weights::Q4_0 => i32::from(block[2 + j - 16] >> 4) - 8,
            Weights::Q8_0 => i32::from(block[2 + j] as i8),
        }
    }
}

/// The largest relative error seen; NaN (an output left poisoned) sticks.
#[derive(Default)]
struct Worst {
    err: f64,
    at: usize,
    want: f64,
}

impl Worst {
    fn add(&mut self, got: f32, want: f64, mag: f64, at: usize) {
        let e = (f64::from(got) - want).abs() / (mag + 1e-30);
        if !self.err.is_nan() && (e.is_nan() || e > self.err) {
            *self = Worst { err: e, at, want };
        }
    }

    fn describe(&self, got: &[f32]) -> String {
        format!(
            "{:.2e} at {} (gpu {:e}, cpu {:e})",
            self.err,
            self.at,
            got.get(self.at).copied().unwrap_or(f32::NAN),
            self.want
        )
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f16_bytes(v: &[f16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect()
}

fn i8_bytes(v: &[i8]) -> Vec<u8> {
    v.iter().map(|&x| x as u8).collect()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

struct Report {
    tag: String,
    passed: usize,
    failures: Vec<String>,
}

impl Report {
    fn check(&mut self, what: &str, ok: bool, detail: String) {
        say!(
            "{} [{}] {what} {detail}",
            if ok { "PASS" } else { "FAIL" },
            self.tag
        );
        if ok {
            self.passed += 1;
        } else {
            self.failures.push(format!("{what} {detail}"));
        }
    }
}

// ---- The device ----------------------------------------------------------

fn ok<T>(result: Result<T, HipError>, what: &str) -> T {
    result.unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// A device allocation and its size in bytes.
#[derive(Clone, Copy, Debug)]
struct Buf {
    ptr: DevicePtr,
    len: usize,
}

impl Buf {
    const NONE: Buf = Buf {
        ptr: DevicePtr::NULL,
        len: 0,
    };
}

/// Two u32 in pinned host memory that the spin kernel polls (`flag[0]`)
/// and writes its poll count to (`flag[1]`).
struct PinnedFlag {
    host: *mut u32,
}

impl PinnedFlag {
    fn new(gpu: &Gpu) -> PinnedFlag {
        let host = ok(gpu.rt.host_malloc(64), "pinned flag").cast::<u32>();
        assert!(!host.is_null() && host.is_aligned());
        let flag = PinnedFlag { host };
        flag.set(0, 0);
        flag.set(1, 0);
        flag
    }

    /// The address kernels use: pinned host memory is mapped into the
    /// device's address space at the same address (unified addressing:
    /// `hipHostMalloc` allocations are mapped; the CUDA driver maps every
    /// `cuMemAllocHost` allocation on 64-bit unified-addressing systems).
    fn device_ptr(&self) -> DevicePtr {
        DevicePtr(self.host as usize as u64)
    }

    fn set(&self, i: usize, v: u32) {
        assert!(i < 2);
        // SAFETY: `host` points to 64 live, aligned bytes of pinned memory
        // (freed only by `free`, which takes the flag); the device reads
        // and writes it concurrently, which is why the access is volatile,
        // and the fence orders it before later host actions.
        unsafe { ptr::write_volatile(self.host.add(i), v) };
        fence(Ordering::SeqCst);
    }

    fn get(&self, i: usize) -> u32 {
        assert!(i < 2);
        fence(Ordering::SeqCst);
        // SAFETY: as in `set`.
        unsafe { ptr::read_volatile(self.host.add(i)) }
    }

    fn free(self, gpu: &Gpu) {
        // SAFETY: from host_malloc of this runtime, freed once (this takes
        // the flag); callers free it only after every kernel using it has
        // been seen to finish.
        ok(unsafe { gpu.rt.host_free(self.host.cast()) }, "hipHostFree");
    }
}

/// The runtime, one stream, one event, the kernels' module and a pinned
/// staging buffer. Not freed on drop: a test that panics may leave work on
/// the GPU, so only [`Gpu::close`], after every wait succeeded, frees.
struct Gpu {
    rt: Runtime,
    stream: Stream,
    event: Event,
    module: Module,
    staging: *mut u8,
    /// Device allocations of the current check.
    buffers: std::cell::RefCell<Vec<DevicePtr>>,
    tag: String,
}

/// Skips (one line) or, with `ROCMFORGE_REQUIRE_HIP_DEVICE=1`, fails.
fn skip(why: &str) -> Option<Gpu> {
    if std::env::var(REQUIRE_ENV).as_deref() == Ok("1") {
        panic!("device_kernels: no GPU to run the kernels on: {why} ({REQUIRE_ENV}=1)");
    }
    say!("device_kernels: skipped: {why} (set {REQUIRE_ENV}=1 to fail instead)");
    None
}

impl Gpu {
    fn open() -> Option<Gpu> {
        let rt = match Runtime::from_env() {
            Ok(rt) => rt,
            Err(e) => return skip(&e.to_string()),
        };
        let flavor = rt.flavor();
        match rt.device_count() {
            Ok(0) => return skip(&format!("{flavor} from {}: no device", rt.library_path())),
            Ok(_) => {}
            Err(e) => return skip(&format!("{flavor} from {}: {e}", rt.library_path())),
        }
        let props = ok(rt.device_properties(0), "device 0 properties");
        let driver = rt
            .driver_version()
            .map_or_else(|e| format!("unknown ({e})"), |v| v.to_string());
        say!(
            "device_kernels: {flavor}: {} ({}, {} CUs, warp {}, {:.1} GiB) from {}, driver {driver}",
            props.name,
            props.arch,
            props.compute_units,
            props.warp_size,
            props.total_mem as f64 / (1u64 << 30) as f64,
            rt.library_path()
        );

        // The kernels for this device: by gcnArchName, or the PTX for its
        // sm_NN, or a file named by ROCMFORGE_HIP_TEST_MODULE.
        let (image, tag, source): (Cow<'static, [u8]>, String, String) =
            match std::env::var_os(MODULE_ENV) {
                Some(path) => {
                    let path = std::path::PathBuf::from(path);
                    let bytes = std::fs::read(&path)
                        .unwrap_or_else(|e| panic!("{MODULE_ENV}={}: {e}", path.display()));
                    let name = path.file_name().map_or_else(
                        || path.display().to_string(),
                        |n| n.to_string_lossy().into_owned(),
                    );
                    let source =
                        format!("{} ({} bytes, {MODULE_ENV})", path.display(), bytes.len());
                    (Cow::Owned(bytes), format!("file {name}"), source)
                }
                None => {
                    let found = match flavor {
                        Flavor::Hip => code_objects::for_arch(&props.arch),
                        Flavor::CudaDriver => code_objects::ptx_for(&props.arch),
                    };
                    let image = match found {
                        Ok(image) => image,
                        Err(e) => return skip(&format!("{} ({}): {e}", props.name, props.arch)),
                    };
                    let target = match flavor {
                        Flavor::Hip => rocmforge_hip::base_arch(&props.arch).to_string(),
                        Flavor::CudaDriver => code_objects::ptx_modules()
                            .iter()
                            .find(|(_, bytes)| ptr::eq(*bytes, image))
                            .map_or_else(|| props.arch.clone(), |(t, _)| t.to_string()),
                    };
                    let kind = match flavor {
                        Flavor::Hip => "code object",
                        Flavor::CudaDriver => "PTX",
                    };
                    let compiler = build_summary().compiler.unwrap_or("unknown compiler");
                    let source = format!(
                        "embedded {kind} for {target} ({} bytes), built by {compiler}",
                        image.len()
                    );
                    // Borrowed: the embedded copy keeps its 16-byte alignment.
                    (Cow::Borrowed(image), target, source)
                }
            };
        say!("device_kernels: kernels: {source}");

        ok(rt.set_device(0), "set_device(0)");
        // SAFETY: an embedded image is build.rs's clang output for this
        // flavor, complete (a code object for HIP, NUL-terminated PTX for
        // the CUDA driver); a ROCMFORGE_HIP_TEST_MODULE file is the
        // caller's promise of the same.
        let module = ok(unsafe { rt.module_load_data(&image) }, "load the kernels");
        let stream = ok(rt.stream_create(), "stream_create");
        let event = ok(rt.event_create(), "event_create");
        let staging = ok(rt.host_malloc(STAGING_BYTES), "pinned staging buffer");
        Some(Gpu {
            rt,
            stream,
            event,
            module,
            staging,
            buffers: Default::default(),
            tag,
        })
    }

    /// Frees everything. Only called when every piece of work was waited
    /// for.
    fn close(self) {
        self.release();
        // SAFETY: all queued work finished (every launch and copy was
        // waited for); none of these objects is used again.
        unsafe {
            ok(self.rt.module_unload(self.module), "module_unload");
            ok(self.rt.host_free(self.staging), "free staging");
            ok(self.rt.event_destroy(self.event), "event_destroy");
            ok(self.rt.stream_destroy(self.stream), "stream_destroy");
        }
    }

    fn alloc(&self, len: usize) -> Buf {
        let ptr = ok(self.rt.malloc(len.max(4)), "malloc");
        self.buffers.borrow_mut().push(ptr);
        Buf { ptr, len }
    }

    /// Frees the current check's buffers.
    fn release(&self) {
        for ptr in self.buffers.borrow_mut().drain(..) {
            // SAFETY: from this runtime's malloc, freed once (drained);
            // every copy and launch was waited for before its function
            // returned, so no work on the GPU uses it.
            ok(unsafe { self.rt.free(ptr) }, "free");
        }
    }

    /// Records the event after everything queued so far.
    fn record(&self) {
        // SAFETY: event and stream live until close().
        ok(
            unsafe { self.rt.event_record(self.event, self.stream) },
            "event_record",
        );
    }

    /// Whether the work before the last record has finished.
    fn ready(&self) -> bool {
        // SAFETY: the event lives until close().
        let status = ok(unsafe { self.rt.event_query(self.event) }, "event_query");
        status == EventStatus::Ready
    }

    /// Polls the last record until it is done (true) or `deadline` passes.
    fn poll_until(&self, deadline: Instant) -> bool {
        loop {
            if self.ready() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// The bounded wait for everything queued so far.
    fn wait(&self, what: &str) {
        self.record();
        if !self.poll_until(Instant::now() + DEADLINE) {
            panic!(
                "[{}] {what}: not finished after {} s (bounded wait on an event); the GPU may \
                 be hung (RDNA: MES/CWSR firmware, amdgpu.cwsr_enable=0; gfx1151 copies: \
                 HSA_ENABLE_SDMA=0). Leaking its buffers.",
                self.tag,
                DEADLINE.as_secs()
            );
        }
    }

    fn upload(&self, bytes: &[u8]) -> Buf {
        let buf = self.alloc(bytes.len());
        for (i, chunk) in bytes.chunks(STAGING_BYTES).enumerate() {
            // SAFETY: `staging` holds STAGING_BYTES >= chunk.len() bytes
            // and no copy is in flight (each one is waited for below).
            unsafe { ptr::copy_nonoverlapping(chunk.as_ptr(), self.staging, chunk.len()) };
            // SAFETY: the source is pinned and untouched until the wait;
            // the destination range lies within `buf`.
            ok(
                unsafe {
                    self.rt.memcpy_htod_async(
                        buf.ptr.offset((i * STAGING_BYTES) as u64),
                        self.staging,
                        chunk.len(),
                        self.stream,
                    )
                },
                "memcpy_htod_async",
            );
            self.wait("upload");
        }
        buf
    }

    fn download(&self, buf: Buf) -> Vec<u8> {
        let mut out = Vec::with_capacity(buf.len);
        let mut at = 0;
        while at < buf.len {
            let n = (buf.len - at).min(STAGING_BYTES);
            // SAFETY: the source range lies within `buf`; the staging
            // buffer holds n bytes and nothing touches it until the wait.
            ok(
                unsafe {
                    self.rt.memcpy_dtoh_async(
                        self.staging,
                        buf.ptr.offset(at as u64),
                        n,
                        self.stream,
                    )
                },
                "memcpy_dtoh_async",
            );
            self.wait("download");
            // SAFETY: the copy finished; staging holds n initialised bytes.
            out.extend_from_slice(unsafe { std::slice::from_raw_parts(self.staging, n) });
            at += n;
        }
        out
    }

    /// Fills a buffer with `byte`, ordered before the next launch.
    fn poison(&self, buf: Buf, byte: u8) {
        // SAFETY: the whole of a live allocation; work on this stream runs
        // in order and nothing else uses the buffer.
        ok(
            unsafe { self.rt.memset_async(buf.ptr, byte, buf.len, self.stream) },
            "memset_async",
        );
    }

    /// Queues `kernel` without waiting.
    ///
    /// # Safety
    ///
    /// `args` holds one pointer per parameter of `kernel`, in order, each
    /// to a value of that parameter's type (a [`DevicePtr`] for a pointer,
    /// the shape struct by value), and every buffer the kernel touches for
    /// those arguments is live, large enough and used by nothing else until
    /// the launch is seen to finish.
    unsafe fn launch_async(
        &self,
        kernel: &CStr,
        grid: [u32; 3],
        block: u32,
        args: &mut [*mut c_void],
    ) {
        let name = kernel.to_string_lossy();
        // SAFETY: the module lives until close().
        let function = ok(
            unsafe { self.rt.module_get_function(self.module, kernel) },
            &format!("{name}: module_get_function"),
        );
        // SAFETY: the caller's contract; the stream lives until close().
        ok(
            unsafe {
                self.rt
                    .launch_kernel(function, grid, [block, 1, 1], 0, self.stream, args)
            },
            &format!("{name}: launch"),
        );
    }

    /// Queues `kernel` and waits for it (bounded).
    ///
    /// # Safety
    ///
    /// As [`launch_async`](Gpu::launch_async).
    unsafe fn launch(&self, kernel: &CStr, grid: [u32; 3], block: u32, args: &mut [*mut c_void]) {
        // SAFETY: the caller's contract.
        unsafe { self.launch_async(kernel, grid, block, args) };
        self.wait(&kernel.to_string_lossy());
    }

    /// `quantize_q8(const float* x, int8_t* quants, float2* scales,
    /// QuantizeShape s)`.
    fn quantize_q8(&self, x: Buf, quants: Buf, scales: Buf, shape: QuantizeShape) {
        let n = shape.n as usize;
        assert!(
            n.is_multiple_of(32) && x.len >= 4 * n && quants.len >= n && scales.len >= n / 32 * 8
        );
        let (mut x, mut q, mut s, mut shape) = (x.ptr, quants.ptr, scales.ptr, shape);
        let grid = shape.grid();
        // SAFETY: the kernel's four parameters in order; it reads n floats
        // and writes n quants and n / 32 float2, all within the buffers
        // (asserted above).
        unsafe {
            self.launch(
                c"quantize_q8",
                grid,
                QuantizeShape::BLOCK,
                &mut [arg(&mut x), arg(&mut q), arg(&mut s), arg(&mut shape)],
            )
        };
    }

    /// `rmsnorm_f32(const float* x, const float* w, float* out,
    /// RmsNormShape s)`.
    fn rmsnorm_f32(&self, x: Buf, w: Buf, out: Buf, shape: RmsNormShape) {
        let n = shape.group as usize * shape.n_groups as usize;
        assert!(x.len >= 4 * n && out.len >= 4 * n && w.len >= 4 * shape.group as usize);
        let (mut x, mut w, mut out, mut shape) = (x.ptr, w.ptr, out.ptr, shape);
        let grid = shape.grid();
        // SAFETY: the kernel's four parameters in order; it reads n values
        // of x and `group` of w, and writes n values of out (asserted).
        unsafe {
            self.launch(
                c"rmsnorm_f32",
                grid,
                RmsNormShape::BLOCK,
                &mut [arg(&mut x), arg(&mut w), arg(&mut out), arg(&mut shape)],
            )
        };
    }

    /// `rmsnorm_f32_q8(const float* x, const float* w, float* out,
    /// int8_t* q8, float2* q8_scales, RmsNormShape s)`.
    fn rmsnorm_f32_q8(&self, x: Buf, w: Buf, out: Buf, q: Buf, s: Buf, shape: RmsNormShape) {
        let n = shape.group as usize * shape.n_groups as usize;
        assert!(shape.group.is_multiple_of(32));
        assert!(x.len >= 4 * n && out.len >= 4 * n && w.len >= 4 * shape.group as usize);
        assert!(q.len >= n && s.len >= n / 32 * 8);
        let (mut x, mut w, mut out, mut q, mut s, mut shape) =
            (x.ptr, w.ptr, out.ptr, q.ptr, s.ptr, shape);
        let grid = shape.grid();
        // SAFETY: the kernel's six parameters in order; as rmsnorm_f32,
        // plus n quants and n / 32 float2 written (asserted).
        unsafe {
            self.launch(
                c"rmsnorm_f32_q8",
                grid,
                RmsNormShape::BLOCK,
                &mut [
                    arg(&mut x),
                    arg(&mut w),
                    arg(&mut out),
                    arg(&mut q),
                    arg(&mut s),
                    arg(&mut shape),
                ],
            )
        };
    }

    /// `matvec_q4_0` / `matvec_q8_0(const uint8_t* w, const int8_t* xq,
    /// const float2* xs, const float* bias, const float* residual,
    /// float* out, MatvecShape s)`; bias and residual may be null.
    #[allow(clippy::too_many_arguments)]
    fn matvec(
        &self,
        weights: Weights,
        w: Buf,
        xq: Buf,
        xs: Buf,
        bias: Option<Buf>,
        residual: Option<Buf>,
        out: Buf,
        shape: MatvecShape,
    ) {
        let (rows, k, t) = (
            shape.rows as usize,
            shape.k as usize,
            shape.n_tokens as usize,
        );
        let nb = k / 32;
        assert!(k.is_multiple_of(32) && rows > 0 && (1..=8).contains(&t));
        assert!(w.len >= rows * nb * weights.block_bytes());
        assert!(xq.len >= t * k && xs.len >= t * nb * 8 && out.len >= 4 * t * rows);
        assert!(bias.is_none_or(|b| b.len >= 4 * rows));
        assert!(residual.is_none_or(|r| r.len >= 4 * t * rows));
        let mut w = w.ptr;
        let mut xq = xq.ptr;
        let mut xs = xs.ptr;
        let mut bias = bias.map_or(DevicePtr::NULL, |b| b.ptr);
        let mut residual = residual.map_or(DevicePtr::NULL, |r| r.ptr);
        let mut out = out.ptr;
        let mut shape = shape;
        let grid = shape.grid();
        // SAFETY: the kernel's seven parameters in order; it reads `rows`
        // weight rows, `t` tokens of Q8-packed activations, `rows` biases
        // and `t * rows` residuals (or nothing through null), and writes
        // `t * rows` outputs, all within the buffers (asserted).
        unsafe {
            self.launch(
                weights.kernel(),
                grid,
                MatvecShape::BLOCK,
                &mut [
                    arg(&mut w),
                    arg(&mut xq),
                    arg(&mut xs),
                    arg(&mut bias),
                    arg(&mut residual),
                    arg(&mut out),
                    arg(&mut shape),
                ],
            )
        };
    }

    /// `matmul_f16(const half* a, const half* b, const float* bias,
    /// float* c, MatmulShape s)`; bias may be null.
    fn matmul_f16(&self, a: Buf, b: Buf, bias: Option<Buf>, c: Buf, shape: MatmulShape) {
        let (m, n, k) = (shape.m as usize, shape.n as usize, shape.k as usize);
        assert!(
            k.is_multiple_of(8) && a.len >= 2 * m * k && b.len >= 2 * n * k && c.len >= 4 * m * n
        );
        assert!(bias.is_none_or(|x| x.len >= 4 * n));
        let mut a = a.ptr;
        let mut b = b.ptr;
        let mut bias = bias.map_or(DevicePtr::NULL, |x| x.ptr);
        let mut c = c.ptr;
        let mut shape = shape;
        let grid = shape.grid();
        // SAFETY: the kernel's five parameters in order; it reads m x k and
        // n x k halves (16-byte loads, k % 8 == 0, allocations aligned) and
        // n biases (or none), and writes m x n floats (asserted).
        unsafe {
            self.launch(
                c"matmul_f16",
                grid,
                MatmulShape::BLOCK,
                &mut [
                    arg(&mut a),
                    arg(&mut b),
                    arg(&mut bias),
                    arg(&mut c),
                    arg(&mut shape),
                ],
            )
        };
    }

    /// `spin(volatile uint32_t* flag, SpinShape s)`, waited for (bounded).
    fn spin(&self, flag: &PinnedFlag, shape: SpinShape) {
        // SAFETY: see launch_spin; the wait below (or a panic that leaks
        // the flag) comes before the flag can be freed.
        unsafe { self.launch_spin(flag, shape) };
        self.wait("spin");
    }

    /// Queues `spin` without waiting.
    ///
    /// # Safety
    ///
    /// `flag` stays allocated until the launch is seen to finish.
    unsafe fn launch_spin(&self, flag: &PinnedFlag, shape: SpinShape) {
        let mut f = flag.device_ptr();
        let mut shape = shape;
        let grid = shape.grid();
        // SAFETY: the kernel's two parameters in order; it reads flag[0]
        // and writes flag[1], both within the pinned allocation, which the
        // caller keeps alive until the launch finishes.
        unsafe {
            self.launch_async(
                c"spin",
                grid,
                SpinShape::BLOCK,
                &mut [arg(&mut f), arg(&mut shape)],
            )
        };
    }
}

/// A kernel argument: a pointer to its value.
fn arg<T>(value: &mut T) -> *mut c_void {
    (value as *mut T).cast()
}
