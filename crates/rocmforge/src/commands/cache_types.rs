//! `--cache-type-k` / `--cache-type-v` (`-ctk` / `-ctv`), as llama.cpp's:
//! how the KV cache keeps K and V. Shared by every command that opens a
//! session.

use rocmforge_core::plan::{KvType, KvTypes};

#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub struct CacheTypeArgs {
    /// KV cache type for K: f16, q8_0 or q4_0 (llama.cpp's -ctk).
    #[arg(long = "cache-type-k", value_name = "TYPE", value_parser = KvType::parse, default_value = "f16")]
    pub cache_type_k: KvType,
    /// KV cache type for V: f16, q8_0 or q4_0 (llama.cpp's -ctv).
    #[arg(long = "cache-type-v", value_name = "TYPE", value_parser = KvType::parse, default_value = "f16")]
    pub cache_type_v: KvType,
}

impl CacheTypeArgs {
    pub fn types(&self) -> KvTypes {
        KvTypes {
            k: self.cache_type_k,
            v: self.cache_type_v,
        }
    }
}
