//! Everything that can go wrong reading or writing a GGUF file.
//!
//! Each variant carries enough to find the problem: a byte offset, the metadata
//! key or tensor name, and the offending value.

use crate::quant::QuantType;

#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },

    #[error("not a GGUF file: bytes 0..4 are {found:02x?}, expected \"GGUF\"")]
    BadMagic { found: [u8; 4] },

    #[error(
        "big-endian GGUF files are not supported (version field at byte 4 reads {version:#010x})"
    )]
    BigEndian { version: u32 },

    #[error("unsupported GGUF version {version} at byte 4 (only versions 2 and 3 are supported)")]
    UnsupportedVersion { version: u32 },

    #[error("file truncated: {what} in {at} needs {needed} bytes at byte {offset}, but the file ends at byte {file_size}")]
    Truncated {
        what: &'static str,
        at: String,
        offset: u64,
        needed: u64,
        file_size: u64,
    },

    /// A declared count or length that cannot possibly fit in the rest of the
    /// file; caught before anything is allocated for it.
    #[error("{what} in {at} at byte {offset} is {count}, more than the {remaining} bytes left in the file can hold")]
    CountTooLarge {
        what: &'static str,
        at: String,
        offset: u64,
        count: u64,
        remaining: u64,
    },

    #[error("invalid UTF-8 in {what} in {at} at byte {offset}")]
    InvalidUtf8 {
        what: &'static str,
        at: String,
        offset: u64,
    },

    #[error("unknown metadata value type {type_id} in {at} at byte {offset}")]
    UnknownValueType {
        type_id: u32,
        at: String,
        offset: u64,
    },

    #[error("invalid bool byte {value:#04x} in {at} at byte {offset} (must be 0 or 1)")]
    InvalidBool { value: u8, at: String, offset: u64 },

    #[error("arrays nested deeper than {max} levels in {at} at byte {offset}")]
    NestingTooDeep { max: usize, at: String, offset: u64 },

    #[error(
        "duplicate metadata key '{}' at byte {offset}",
        key.escape_debug()
    )]
    DuplicateKey { key: String, offset: u64 },

    /// `found` is [`super::GgufValue::brief`] of the value.
    #[error("general.alignment is {found}; it must be a power of two that fits in u32")]
    InvalidAlignment { found: String },

    #[error(
        "tensor '{}' has {n_dims} dimensions, at most 4 are allowed",
        tensor.escape_debug()
    )]
    TooManyDims { tensor: String, n_dims: u64 },

    #[error(
        "tensor '{}' has a zero dimension in shape {shape:?}",
        tensor.escape_debug()
    )]
    ZeroDim { tensor: String, shape: Vec<u64> },

    #[error(
        "tensor '{}' shape {shape:?} is too large: its element or byte count overflows",
        tensor.escape_debug()
    )]
    ShapeOverflow { tensor: String, shape: Vec<u64> },

    #[error(
        "tensor '{}' of type {ty}: row length {row_len} is not a multiple of the block size {block_size}",
        tensor.escape_debug()
    )]
    PartialBlock {
        tensor: String,
        ty: QuantType,
        row_len: u64,
        block_size: u64,
    },

    #[error(
        "tensor '{}' has unknown ggml type id {type_id} (tensor info at byte {offset})",
        tensor.escape_debug()
    )]
    UnknownTensorType {
        tensor: String,
        type_id: u32,
        offset: u64,
    },

    #[error(
        "tensor '{}' data offset {offset} is not a multiple of the alignment {alignment}",
        tensor.escape_debug()
    )]
    MisalignedTensor {
        tensor: String,
        offset: u64,
        alignment: u64,
    },

    #[error(
        "tensor '{}' data ({n_bytes} bytes at offset {offset} after the data section start {data_offset}) runs past the end of the file at byte {file_size}",
        tensor.escape_debug()
    )]
    TensorOutOfBounds {
        tensor: String,
        offset: u64,
        n_bytes: u64,
        data_offset: u64,
        file_size: u64,
    },

    #[error(
        "duplicate tensor name '{}'",
        tensor.escape_debug()
    )]
    DuplicateTensor { tensor: String },

    #[error(
        "tensor '{}': got {actual} bytes of data, its shape and type need {expected}",
        tensor.escape_debug()
    )]
    DataLength {
        tensor: String,
        expected: u64,
        actual: u64,
    },

    #[error(
        "tensor '{}' was declared but never given data",
        tensor.escape_debug()
    )]
    MissingTensorData { tensor: String },

    #[error("got {len} bytes of tensor data, but every declared tensor has already been written")]
    NoTensorPending { len: u64 },

    #[error(
        "metadata key '{}': array mixes element types {first} and {other}",
        key.escape_debug()
    )]
    MixedArray {
        key: String,
        first: &'static str,
        other: &'static str,
    },
}
