//! GGUF files: the reader ([`GgufFile`]) and the writer ([`GgufWriter`]).
//!
//! Layout (little-endian, versions 2 and 3):
//! `"GGUF"`, u32 version, u64 tensor count, u64 metadata count, the metadata
//! key/value pairs, the tensor infos, zero padding up to `general.alignment`, then
//! the data section. Tensor offsets are relative to the data section and each one
//! is a multiple of the alignment.
//!
//! The reader treats every file as hostile: each count, length, offset and shape
//! is checked against the bytes actually present before it is used, so a corrupt
//! file yields a [`GgufError`] naming the place, never a panic or a huge
//! allocation.

mod cursor;
mod error;
mod file;
mod file_type;
mod parse;
mod tensor;
mod value;
mod writer;

pub use error::GgufError;
pub use file::GgufFile;
pub use file_type::{FileType, FILE_TYPE_KEY};
pub use tensor::TensorInfo;
pub use value::GgufValue;
pub use writer::{GgufStream, GgufWriter};

/// The first four bytes of every GGUF file.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";

/// The version [`GgufWriter`] produces.
pub const GGUF_VERSION: u32 = 3;

/// Data-section alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// The metadata key that overrides [`DEFAULT_ALIGNMENT`].
pub const ALIGNMENT_KEY: &str = "general.alignment";

/// ggml tensors have at most this many dimensions.
pub const MAX_DIMS: usize = 4;

/// Deepest array-of-array nesting accepted. Real files use one level; the limit
/// keeps a hostile file from overflowing the stack through recursion.
pub const MAX_ARRAY_NESTING: usize = 32;
