//! Tests of the block formats: bit-exact agreement with ggml's reference
//! quantizers, hand-built blocks, round-trip error bounds, length errors and the
//! real tensors of a llama.cpp-written model.

mod data;
mod fixture;
mod ggml_parity;
mod hand_blocks;
mod lengths;
mod roundtrip;
