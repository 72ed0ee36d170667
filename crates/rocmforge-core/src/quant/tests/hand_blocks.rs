//! Blocks built byte by byte from ggml's struct definitions, with the expected
//! values worked out by hand. A field at the wrong offset, a nibble or bit
//! plane read from the wrong place, or a mis-unpacked 6-bit scale shows up
//! here as a wrong number.

use crate::quant::{dequantize, quantize_to_vec, QuantType};

const F16_ONE: [u8; 2] = [0x00, 0x3C];
const F16_HALF: [u8; 2] = [0x00, 0x38];
const F16_QUARTER: [u8; 2] = [0x00, 0x34];
const F16_TWO: [u8; 2] = [0x00, 0x40];
const F16_MINUS_ONE: [u8; 2] = [0x00, 0xBC];

fn block(ty: QuantType) -> Vec<u8> {
    vec![0; ty.type_size()]
}

fn decode(ty: QuantType, b: &[u8]) -> Vec<f32> {
    let mut out = vec![f32::NAN; b.len() / ty.type_size() * ty.block_size()];
    dequantize(ty, b, &mut out).unwrap();
    out
}

#[test]
fn float_types() {
    let f16_bits: [u16; 5] = [0x3C00, 0xC000, 0x7BFF, 0x0001, 0xFC00];
    let bytes: Vec<u8> = f16_bits.iter().flat_map(|b| b.to_le_bytes()).collect();
    let v = decode(QuantType::F16, &bytes);
    assert_eq!(v, [1.0, -2.0, 65504.0, 2f32.powi(-24), f32::NEG_INFINITY]);

    let bf16_bits: [u16; 3] = [0x3F80, 0xC0A0, 0x0000];
    let bytes: Vec<u8> = bf16_bits.iter().flat_map(|b| b.to_le_bytes()).collect();
    assert_eq!(decode(QuantType::BF16, &bytes), [1.0, -5.0, 0.0]);

    // Ties round to even; the odd neighbour rounds up.
    let x = [1.0 + 2f32.powi(-11), 1.0 + 3.0 * 2f32.powi(-11), 1e6];
    let h = quantize_to_vec(QuantType::F16, &x).unwrap();
    assert_eq!(h, [0x00, 0x3C, 0x02, 0x3C, 0x00, 0x7C]);
    let x = [1.0 + 2f32.powi(-8), 1.0 + 3.0 * 2f32.powi(-8)];
    let h = quantize_to_vec(QuantType::BF16, &x).unwrap();
    assert_eq!(h, [0x80, 0x3F, 0x82, 0x3F]);

    let x = [1.5f32, -0.0, f32::MIN_POSITIVE];
    let b = quantize_to_vec(QuantType::F32, &x).unwrap();
    assert_eq!(&b[0..4], &[0x00, 0x00, 0xC0, 0x3F]);
    assert_eq!(decode(QuantType::F32, &b), x);
}

/// `qs[j] = j | (15 - j) << 4` for the 4-bit legacy and IQ4_NL payloads.
fn ramp_nibbles(qs: &mut [u8]) {
    for (j, q) in qs.iter_mut().enumerate() {
        *q = j as u8 | ((15 - j as u8) << 4);
    }
}

#[test]
fn q4_0_and_q4_1() {
    let mut b = block(QuantType::Q4_0);
    b[0..2].copy_from_slice(&F16_HALF);
    ramp_nibbles(&mut b[2..18]);
    let v = decode(QuantType::Q4_0, &b);
    assert_eq!((v[0], v[3], v[15]), (-4.0, -2.5, 3.5));
    assert_eq!((v[16], v[31]), (3.5, -4.0));

    let mut b = block(QuantType::Q4_1);
    b[0..2].copy_from_slice(&F16_QUARTER);
    b[2..4].copy_from_slice(&F16_MINUS_ONE);
    ramp_nibbles(&mut b[4..20]);
    let v = decode(QuantType::Q4_1, &b);
    assert_eq!((v[0], v[15], v[16], v[31]), (-1.0, 2.75, 2.75, -1.0));
}

#[test]
fn q5_0_and_q5_1() {
    // Fifth bits: set for even elements below 16 and odd elements from 16.
    let qh = 0xAAAA_5555u32.to_le_bytes();
    let mut b = block(QuantType::Q5_0);
    b[0..2].copy_from_slice(&F16_ONE);
    b[2..6].copy_from_slice(&qh);
    ramp_nibbles(&mut b[6..22]);
    let v = decode(QuantType::Q5_0, &b);
    // element 2: nibble 2 + 16 - 16; element 3: nibble 3 - 16
    assert_eq!((v[2], v[3]), (2.0, -13.0));
    // element 17: nibble 14 + 16 - 16; element 18: nibble 13 - 16
    assert_eq!((v[17], v[18]), (14.0, -3.0));

    let mut b = block(QuantType::Q5_1);
    b[0..2].copy_from_slice(&F16_TWO);
    b[2..4].copy_from_slice(&F16_HALF);
    b[4..8].copy_from_slice(&qh);
    ramp_nibbles(&mut b[8..24]);
    let v = decode(QuantType::Q5_1, &b);
    assert_eq!((v[2], v[3], v[17], v[18]), (36.5, 6.5, 60.5, 26.5));
}

#[test]
fn q8_0_q8_1_q8_k() {
    let mut b = block(QuantType::Q8_0);
    b[0..2].copy_from_slice(&F16_QUARTER);
    b[2] = 0x80; // -128
    b[3] = 0x7F;
    b[33] = 0xFF; // -1
    let v = decode(QuantType::Q8_0, &b);
    assert_eq!((v[0], v[1], v[2], v[31]), (-32.0, 31.75, 0.0, -0.25));

    let mut b = block(QuantType::Q8_1);
    b[0..2].copy_from_slice(&F16_TWO);
    b[2..4].copy_from_slice(&F16_MINUS_ONE); // the sum field is not a value
    b[4] = 3;
    b[35] = 0xFE;
    let v = decode(QuantType::Q8_1, &b);
    assert_eq!((v[0], v[1], v[31]), (6.0, 0.0, -4.0));

    let mut b = block(QuantType::Q8K);
    b[0..4].copy_from_slice(&0.5f32.to_le_bytes());
    b[4] = 0x80;
    b[259] = 0x7F;
    b[260..262].copy_from_slice(&(-1000i16).to_le_bytes()); // bsums are not values
    let v = decode(QuantType::Q8K, &b);
    assert_eq!((v[0], v[1], v[255]), (-64.0, 0.0, 63.5));
}

#[test]
fn q2_k() {
    // scales[16] | qs[64] | d | dmin
    let mut b = block(QuantType::Q2K);
    b[80..82].copy_from_slice(&F16_HALF);
    b[82..84].copy_from_slice(&F16_QUARTER);
    b[0] = 0x21; // sub-block 0: scale 1, min 2
    b[2] = 0x12; // sub-block 2: scale 2, min 1
    b[9] = 0x3F; // sub-block 9: scale 15, min 3
    b[15] = 0xF1; // sub-block 15: scale 1, min 15
    let qs = 16;
    b[qs] = 0b11_10_01_11; // elements 0, 32, 64, 96
    b[qs + 54] = 0x02; // element 150: second half, byte 22 of its group
    b[qs + 63] = 0xC0; // element 255: last byte, top plane
    let v = decode(QuantType::Q2K, &b);
    assert_eq!(v[0], 0.5 * 3.0 - 0.25 * 2.0);
    assert_eq!(v[1], -0.5);
    assert_eq!(v[32], 0.5 * 2.0 * 1.0 - 0.25);
    assert_eq!(v[150], 0.5 * 15.0 * 2.0 - 0.25 * 3.0);
    assert_eq!(v[255], 0.5 * 3.0 - 0.25 * 15.0);
}

#[test]
fn q3_k() {
    // hmask[32] | qs[64] | scales[12] | d
    let mut b = block(QuantType::Q3K);
    b[108..110].copy_from_slice(&F16_ONE);
    let sc = 96;
    b[sc] = 0x01; // scale 0 = 0b10_0001 - 32 = 1: low nibble...
    b[sc + 8] = 0b10; // ...and top bits
    b[sc + 2] = 0xC0; // scale 10 = 0b01_1100 - 32 = -4: low nibble high in byte 2...
    b[sc + 10] = 0b01 << 4; // ...top bits in byte 8 + 10 % 4, bits 2 * (10 / 4)
    let qs = 32;
    b[qs] = 0x02; // element 0 low bits 2, high bit set below
    b[0] = 0x01;
    b[qs + 42] = 0b11 << 2; // element 170: group 1, byte 10, plane 1
    b[qs + 43] = 0b01 << 2; // element 171
    b[11] = 1 << 5; // element 171's high bit: byte 171 % 32, bit 171 / 32
    let v = decode(QuantType::Q3K, &b);
    assert_eq!(v[0], 2.0);
    assert_eq!(v[1], -4.0); // high bit clear: 0 - 4, scale 1
    assert_eq!(v[170], -4.0 * (3.0 - 4.0));
    assert_eq!(v[171], -4.0 * 1.0);
    // Sub-block 1: all-zero scale bits mean -32, all-zero quant bits mean -4.
    assert_eq!(v[16], 128.0);
}

#[test]
fn q4_k_and_q5_k() {
    // d | dmin | scales[12] | (Q5_K: qh[32]) | qs[128]
    for ty in [QuantType::Q4K, QuantType::Q5K] {
        let mut b = block(ty);
        b[0..2].copy_from_slice(&F16_ONE);
        b[2..4].copy_from_slice(&F16_HALF);
        let sc = 4;
        b[sc] = 2; // sub-block 0: scale 2
        b[sc + 4] = 1; // sub-block 0: min 1
                       // sub-block 5: scale 35 = 0b10_0011, min 17 = 0b01_0001
        b[sc + 9] = 0x13;
        b[sc + 1] = 0b10 << 6;
        b[sc + 5] = 0b01 << 6;
        let qs = if ty == QuantType::Q4K { 16 } else { 48 };
        b[qs] = 0x07; // element 0
        b[qs + 67] = 0x70; // element 163: group 2, byte 3, high nibble
        if ty == QuantType::Q5K {
            b[16 + 3] = 1 << 5; // element 163's fifth bit
        }
        let v = decode(ty, &b);
        let high = if ty == QuantType::Q5K { 16.0 } else { 0.0 };
        assert_eq!(v[0], 2.0 * 7.0 - 0.5, "{ty}");
        assert_eq!(v[1], -0.5, "{ty}");
        assert_eq!(v[163], 35.0 * (7.0 + high) - 0.5 * 17.0, "{ty}");
        assert_eq!(v[160], -0.5 * 17.0, "{ty}");
    }
}

#[test]
fn q6_k() {
    // ql[128] | qh[64] | scales[16] | d
    let mut b = block(QuantType::Q6K);
    b[208..210].copy_from_slice(&F16_HALF);
    b[192] = 2;
    b[192 + 4] = 1;
    b[192 + 13] = (-3i8) as u8;
    b[0] = 0xA5; // elements 0 (low) and 64 (high)
    b[128] = 0b0011_0010; // top bits: element 0 -> 2, element 64 -> 3
    b[87] = 0x30; // element 215: half 1, run 2, byte 23: high nibble 3
    let v = decode(QuantType::Q6K, &b);
    assert_eq!(v[0], 0.5 * 2.0 * (37.0 - 32.0));
    assert_eq!(v[64], 0.5 * 1.0 * (58.0 - 32.0));
    assert_eq!(v[215], 0.5 * -3.0 * (3.0 - 32.0));
    assert_eq!(v[1], 0.5 * 2.0 * -32.0);
}

#[test]
fn iq4_nl_and_iq4_xs() {
    let mut b = block(QuantType::IQ4NL);
    b[0..2].copy_from_slice(&F16_TWO);
    b[2] = 0xF0;
    b[17] = 0x78;
    let v = decode(QuantType::IQ4NL, &b);
    assert_eq!((v[0], v[16], v[15], v[31]), (-254.0, 226.0, 2.0, -20.0));

    // d | scales_h | scales_l[4] | qs[128]
    let mut b = block(QuantType::IQ4XS);
    b[0..2].copy_from_slice(&F16_ONE);
    // sub-block 0: 33 (+1); sub-block 3: 47 (+15); sub-block 7: 0 (-32)
    let scales_h: u16 = 0b10 | (0b10 << 6);
    b[2..4].copy_from_slice(&scales_h.to_le_bytes());
    b[4] = 0x01;
    b[5] = 0xF0;
    b[8] = 0x9F; // elements 0 and 16
    b[8 + 127] = 0xF0; // element 255
    let v = decode(QuantType::IQ4XS, &b);
    assert_eq!((v[0], v[16]), (113.0, 13.0));
    assert_eq!((v[97], v[113]), (-127.0 * 15.0, -127.0 * 15.0));
    assert_eq!(v[255], 113.0 * -32.0);
}

#[test]
fn mxfp4() {
    // e | qs[16]; value = 2^(e - 128) * doubled E2M1 level.
    let mut b = block(QuantType::MXFP4);
    b[0] = 130; // half scale 4
    b[1] = 0x9F; // element 0: nibble 15 (-12), element 16: nibble 9 (-1)
    b[8] = 0x07; // element 7: nibble 7 (12), element 23: nibble 0
    b[16] = 0x85; // element 15: nibble 5 (6), element 31: nibble 8 (-0)
    let v = decode(QuantType::MXFP4, &b);
    assert_eq!((v[0], v[16], v[7], v[23]), (-48.0, -4.0, 48.0, 0.0));
    assert_eq!((v[15], v[31], v[1]), (24.0, 0.0, 0.0));

    // Exponents 0 and 1 are subnormal half scales.
    let mut b = block(QuantType::MXFP4);
    b[0] = 1;
    b[1] = 0x07;
    assert_eq!(decode(QuantType::MXFP4, &b)[0], 12.0 * 2f32.powi(-127));

    // max |x| = 6 gives e = floor(log2 6) - 2 + 127 = 127 (half scale
    // 0.5, so x = 0.5 * doubled level): 6 is level 12 (nibble 7); 5 is
    // halfway between 8 and 12 and takes 8 (nibble 6, listed first); -0.25
    // is halfway between 0 and -1 and takes 0.
    let mut x = [0.0f32; 32];
    x[0] = 6.0;
    x[1] = 5.0;
    x[16] = -0.25;
    x[17] = -3.0;
    let q = quantize_to_vec(QuantType::MXFP4, &x).unwrap();
    assert_eq!(q[0], 127);
    assert_eq!((q[1], q[2]), (0x07, 0xD6)); // -3 = -6 * 0.5: nibble 13
}

// The i-quant tests below read grid entries from ggml-common.h by hand:
// iq2xxs_grid[1] = 0x080808080808082b, iq2xs_grid[511] and iq2s_grid[1023]
// = 0x2b2b2b2b2b2b2b2b, iq3xxs_grid[5] = 0x04040c3e, iq3s_grid[259] =
// 0x05090903, iq1s_grid[263] = 0xff0000ffffffff00; entry 0 of every grid
// has all coordinates at the lowest level (8, 4, 1 or -1). ksigns_iq2xs[1]
// = 0x81: sign field 1 negates elements 0 and 7.

#[test]
fn iq2_xxs() {
    // d | per 32: u32 of four grid indices, u32 of signs and scale
    let mut b = block(QuantType::IQ2XXS);
    b[0..2].copy_from_slice(&F16_ONE);
    b[2..6].copy_from_slice(&[0, 1, 0, 0]);
    let aux: u32 = (3 << 28) | 1; // scale 3: db = (0.5 + 3) / 4; group 0 signs 1
    b[6..10].copy_from_slice(&aux.to_le_bytes());
    let v = decode(QuantType::IQ2XXS, &b);
    assert_eq!((v[0], v[1], v[7]), (-7.0, 7.0, -7.0));
    assert_eq!((v[8], v[9]), (0.875 * 43.0, 7.0));
    // Sub-block 1: scale 0 (db = 1/8), no signs.
    assert_eq!(v[32], 1.0);
}

#[test]
fn iq2_xs() {
    // d | qs: [u16; 32] (9-bit index | signs << 9) | scales[8]
    let mut b = block(QuantType::IQ2XS);
    b[0..2].copy_from_slice(&F16_HALF);
    let q0: u16 = 511 | (1 << 9);
    b[2..4].copy_from_slice(&q0.to_le_bytes());
    b[66] = 0x52; // elements 0..16: scale 2, 16..32: scale 5
    let v = decode(QuantType::IQ2XS, &b);
    let db0 = 0.5 * 2.5 * 0.25;
    assert_eq!((v[0], v[1], v[7]), (-db0 * 43.0, db0 * 43.0, -db0 * 43.0));
    assert_eq!(v[8], db0 * 8.0);
    assert_eq!(v[16], 0.5 * 5.5 * 0.25 * 8.0);
}

#[test]
fn iq2_s() {
    // d | qs[32] | signs[32] | qh[8] | scales[8]
    let mut b = block(QuantType::IQ2S);
    b[0..2].copy_from_slice(&F16_ONE);
    b[2 + 1] = 0xFF; // group 1: low index bits...
    b[66] = 0b11 << 2; // ...and its top two bits: index 1023
    b[34 + 1] = 0x81; // group 1: elements 8 and 15 negative
    b[74] = 0x01; // elements 0..16: scale 1
    let v = decode(QuantType::IQ2S, &b);
    let db = 1.5 * 0.25;
    assert_eq!(
        (v[0], v[8], v[9], v[15]),
        (db * 8.0, -db * 43.0, db * 43.0, -db * 43.0)
    );
    assert_eq!(v[16], 0.5 * 0.25 * 8.0);
}

#[test]
fn iq3_xxs() {
    // d | qs[64] | per 32: u32 of four 7-bit sign fields and the scale
    let mut b = block(QuantType::IQ3XXS);
    b[0..2].copy_from_slice(&F16_ONE);
    b[3] = 5; // elements 4..8 from grid entry 5
    let aux: u32 = (1 << 28) | 1;
    b[66..70].copy_from_slice(&aux.to_le_bytes());
    let v = decode(QuantType::IQ3XXS, &b);
    let db = 1.5 * 0.5;
    assert_eq!((v[0], v[1], v[3]), (-db * 4.0, db * 4.0, db * 4.0));
    assert_eq!(
        (v[4], v[5], v[6], v[7]),
        (db * 62.0, db * 12.0, db * 4.0, -db * 4.0)
    );
    assert_eq!(v[32], 0.25 * 4.0);
}

#[test]
fn iq3_s() {
    // d | qs[64] | qh[8] | signs[32] | scales[4]
    let mut b = block(QuantType::IQ3S);
    b[0..2].copy_from_slice(&F16_HALF);
    b[2 + 1] = 3;
    b[66] = 0b10; // second index of group 0 gets its ninth bit: 259
    b[74] = 0x10; // element 4 negative
    b[106] = 0x21; // elements 0..32: scale 1; 32..64: scale 2
    let v = decode(QuantType::IQ3S, &b);
    assert_eq!((v[0], v[3]), (1.5, 1.5));
    assert_eq!((v[4], v[5], v[6], v[7]), (-4.5, 13.5, 13.5, 7.5));
    assert_eq!(v[32], 2.5);
}

#[test]
fn iq1_s() {
    // d | qs[32] | qh: [u16; 8] (index top bits, scale, shift sign)
    let mut b = block(QuantType::IQ1S);
    b[0..2].copy_from_slice(&F16_HALF);
    b[2 + 1] = 7;
    let qh: u16 = 0x8000 | (3 << 12) | (1 << 3); // shift down, scale 7, group 1 index 263
    b[34..36].copy_from_slice(&qh.to_le_bytes());
    let v = decode(QuantType::IQ1S, &b);
    let dl = 0.5 * 7.0;
    assert_eq!(v[0], dl * -1.125);
    // iq1s_grid[263]: 0, -1, -1, -1, -1, 0, 0, -1
    assert_eq!(
        (v[8], v[9], v[13], v[15]),
        (dl * -0.125, dl * -1.125, dl * -0.125, dl * -1.125)
    );
    // Sub-block 1: scale 1, shifted up.
    assert_eq!(v[32], 0.5 * -0.875);
}

#[test]
fn iq1_m() {
    // qs[32] | qh[16] | scales: [u16; 4] (3-bit scales, f16 in top nibbles)
    let mut b = block(QuantType::IQ1M);
    // d = 1.0 = 0x3C00: nibbles 0, 0, 0xC, 0x3 into the four top nibbles.
    let sc: [u16; 4] = [1 | (2 << 3), 0, 0xC000, 0x3000];
    for (i, s) in sc.iter().enumerate() {
        b[48 + 2 * i..50 + 2 * i].copy_from_slice(&s.to_le_bytes());
    }
    b[32] = 0x08; // group 0 shifted down, group 1 up
    b[32 + 2] = 0x07 | 0x80; // group 4: index top bits 7; group 5 shifted down
    b[4] = 0xFF; // group 4 (elements 32..40): index 2047, all +1
    let v = decode(QuantType::IQ1M, &b);
    assert_eq!((v[0], v[8]), (3.0 * -1.125, 3.0 * -0.875));
    assert_eq!(v[16], 5.0 * -0.875);
    assert_eq!((v[32], v[40]), (1.125, -1.125));
}

#[test]
fn tq1_0_and_tq2_0() {
    // qs[48] | qh[4] | d; trits (first most significant) as ceil(t * 256 / 243)
    let mut b = block(QuantType::TQ1_0);
    b[0] = 187; // trits 2, 0, 1, 2, 0 = 177
    b[48] = 70; // trits 0, 2, 1, 1 (and 0) = 66
    b[52..54].copy_from_slice(&F16_HALF);
    let v = decode(QuantType::TQ1_0, &b);
    assert_eq!(
        (v[0], v[32], v[64], v[96], v[128]),
        (0.5, -0.5, 0.0, 0.5, -0.5)
    );
    assert_eq!((v[240], v[244], v[248], v[252]), (-0.5, 0.5, 0.0, 0.0));
    assert_eq!(v[1], -0.5, "byte 0 encodes trits 0, 0, 0, 0, 0");

    // qs[64] | d; 2 bits per element, stored + 1
    let mut b = block(QuantType::TQ2_0);
    b[0] = 0b10_01_00_10;
    b[32 + 5] = 0b11 << 6;
    b[64..66].copy_from_slice(&F16_TWO);
    let v = decode(QuantType::TQ2_0, &b);
    assert_eq!((v[0], v[32], v[64], v[96]), (2.0, -2.0, 0.0, 2.0));
    assert_eq!((v[133], v[229]), (-2.0, 4.0));
}
