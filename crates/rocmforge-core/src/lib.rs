//! rocmforge-core: everything about running a GGUF model that is not device code.
//!
//! Data flows GGUF file → [`gguf`] (parse) → [`model`] (config, weights) →
//! [`graph`] (the forward pass as ops over tensors) → [`plan`] (arena offsets) →
//! a [`backend::Backend`] that records the planned graph once and replays it every
//! token → [`sampler`] → [`tokenizer`] (text).

pub mod backend;
pub mod chat;
pub mod expert_offload;
pub mod gguf;
pub mod gpu;
pub mod grammar;
pub mod graph;
pub mod model;
pub mod perplexity;
pub mod plan;
pub mod quant;
pub mod sampler;
pub mod session;
pub mod tokenizer;
