//! Parsing and validating everything before the data section.

use std::collections::HashMap;

use super::cursor::{Cursor, Place};
use super::error::GgufError;
use super::tensor::{align_up, tensor_n_bytes, TensorInfo};
use super::value::{GgufValue, ValueType};
use super::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_ARRAY_NESTING, MAX_DIMS};
use crate::quant::QuantType;

/// Smallest possible metadata entry: empty key (u64 length), type id, one byte.
const MIN_KV_SIZE: u64 = 8 + 4 + 1;
/// Smallest possible tensor info: empty name, n_dims 0, type id, offset.
const MIN_TENSOR_INFO_SIZE: u64 = 8 + 4 + 4 + 8;

/// The validated header of a GGUF file.
pub(crate) struct Header {
    pub(crate) version: u32,
    pub(crate) metadata: Vec<(String, GgufValue)>,
    pub(crate) key_index: HashMap<String, usize>,
    pub(crate) tensors: Vec<TensorInfo>,
    pub(crate) tensor_index: HashMap<String, usize>,
    pub(crate) alignment: u64,
    pub(crate) data_offset: u64,
}

pub(crate) fn parse_header(bytes: &[u8]) -> Result<Header, GgufError> {
    let mut cur = Cursor::new(bytes);
    let magic = cur.take(4, "magic")?;
    if magic != GGUF_MAGIC {
        let mut found = [0u8; 4];
        found.copy_from_slice(magic);
        return Err(GgufError::BadMagic { found });
    }
    let version = cur.read_u32("version")?;
    check_version(version)?;

    let n_tensors_offset = cur.offset();
    let n_tensors = cur.read_u64("tensor count")?;
    let n_kv_offset = cur.offset();
    let n_kv = cur.read_u64("metadata count")?;
    cur.check_count(
        "tensor count",
        n_tensors,
        MIN_TENSOR_INFO_SIZE,
        n_tensors_offset,
    )?;
    cur.check_count("metadata count", n_kv, MIN_KV_SIZE, n_kv_offset)?;

    let (metadata, key_index) = read_metadata(&mut cur, n_kv)?;
    let alignment = alignment_from(&metadata, &key_index)?;
    let (tensors, tensor_index) = read_tensor_infos(&mut cur, n_tensors)?;

    // The header ends well below 2^63 and the alignment is at most 2^31, so
    // this cannot saturate; saturating just keeps the code panic-free.
    let data_offset = align_up(cur.offset(), alignment).unwrap_or(u64::MAX);
    check_tensor_placement(&tensors, alignment, data_offset, cur.file_size())?;

    Ok(Header {
        version,
        metadata,
        key_index,
        tensors,
        tensor_index,
        alignment,
        data_offset,
    })
}

fn check_version(version: u32) -> Result<(), GgufError> {
    match version {
        2 | 3 => Ok(()),
        // A big-endian writer stores small versions in the high byte.
        v if v & 0xffff == 0 && (1..=3).contains(&v.swap_bytes()) => {
            Err(GgufError::BigEndian { version: v })
        }
        v => Err(GgufError::UnsupportedVersion { version: v }),
    }
}

type Metadata = (Vec<(String, GgufValue)>, HashMap<String, usize>);

fn read_metadata(cur: &mut Cursor, n_kv: u64) -> Result<Metadata, GgufError> {
    // n_kv was bounded by the file size, so these allocations are too.
    let mut metadata = Vec::with_capacity(n_kv as usize);
    let mut index = HashMap::with_capacity(n_kv as usize);
    for i in 0..n_kv {
        cur.place = Place::KeyName(i);
        let key_offset = cur.offset();
        let key = cur.read_string("metadata key")?;
        if index.contains_key(&key) {
            return Err(GgufError::DuplicateKey {
                key,
                offset: key_offset,
            });
        }
        cur.place = Place::Value(key.clone());
        let ty = read_value_type(cur, "value type")?;
        let value = read_value(cur, ty, 0)?;
        index.insert(key.clone(), metadata.len());
        metadata.push((key, value));
    }
    Ok((metadata, index))
}

fn read_value_type(cur: &mut Cursor, what: &'static str) -> Result<ValueType, GgufError> {
    let offset = cur.offset();
    let type_id = cur.read_u32(what)?;
    ValueType::from_id(type_id).ok_or_else(|| GgufError::UnknownValueType {
        type_id,
        at: cur.at(),
        offset,
    })
}

/// One value of type `ty`; `depth` is how many arrays enclose it.
fn read_value(cur: &mut Cursor, ty: ValueType, depth: usize) -> Result<GgufValue, GgufError> {
    Ok(match ty {
        ValueType::U8 => GgufValue::U8(cur.read_u8("u8 value")?),
        ValueType::I8 => GgufValue::I8(cur.read_u8("i8 value")? as i8),
        ValueType::U16 => GgufValue::U16(cur.read_u16("u16 value")?),
        ValueType::I16 => GgufValue::I16(cur.read_u16("i16 value")? as i16),
        ValueType::U32 => GgufValue::U32(cur.read_u32("u32 value")?),
        ValueType::I32 => GgufValue::I32(cur.read_u32("i32 value")? as i32),
        ValueType::F32 => GgufValue::F32(f32::from_bits(cur.read_u32("f32 value")?)),
        ValueType::U64 => GgufValue::U64(cur.read_u64("u64 value")?),
        ValueType::I64 => GgufValue::I64(cur.read_u64("i64 value")? as i64),
        ValueType::F64 => GgufValue::F64(f64::from_bits(cur.read_u64("f64 value")?)),
        ValueType::Bool => {
            let offset = cur.offset();
            match cur.read_u8("bool value")? {
                0 => GgufValue::Bool(false),
                1 => GgufValue::Bool(true),
                value => {
                    return Err(GgufError::InvalidBool {
                        value,
                        at: cur.at(),
                        offset,
                    })
                }
            }
        }
        ValueType::String => GgufValue::String(cur.read_string("string value")?),
        ValueType::Array => read_array(cur, depth + 1)?,
    })
}

fn read_array(cur: &mut Cursor, depth: usize) -> Result<GgufValue, GgufError> {
    if depth > MAX_ARRAY_NESTING {
        return Err(GgufError::NestingTooDeep {
            max: MAX_ARRAY_NESTING,
            at: cur.at(),
            offset: cur.offset(),
        });
    }
    let elem_ty = read_value_type(cur, "array element type")?;
    let count_offset = cur.offset();
    let count = cur.read_u64("array length")?;
    cur.check_count(
        "array length",
        count,
        elem_ty.min_encoded_size(),
        count_offset,
    )?;
    let mut items = Vec::with_capacity(count as usize);
    for _ in 0..count {
        items.push(read_value(cur, elem_ty, depth)?);
    }
    Ok(GgufValue::Array(items))
}

fn alignment_from(
    metadata: &[(String, GgufValue)],
    index: &HashMap<String, usize>,
) -> Result<u64, GgufError> {
    let Some(&i) = index.get(ALIGNMENT_KEY) else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    let value = &metadata[i].1;
    // llama.cpp keeps the alignment in a u32; accept any integer type holding
    // such a value.
    match value.as_u32() {
        Some(a) if a.is_power_of_two() => Ok(a.into()),
        _ => Err(GgufError::InvalidAlignment {
            found: value.brief(),
        }),
    }
}

type Tensors = (Vec<TensorInfo>, HashMap<String, usize>);

fn read_tensor_infos(cur: &mut Cursor, n_tensors: u64) -> Result<Tensors, GgufError> {
    // n_tensors was bounded by the file size, so these allocations are too.
    let mut tensors = Vec::with_capacity(n_tensors as usize);
    let mut index = HashMap::with_capacity(n_tensors as usize);
    for i in 0..n_tensors {
        cur.place = Place::TensorName(i);
        let info_offset = cur.offset();
        let name = cur.read_string("tensor name")?;
        cur.place = Place::Tensor(name.clone());
        let n_dims = cur.read_u32("dimension count")?;
        if n_dims as usize > MAX_DIMS {
            return Err(GgufError::TooManyDims {
                tensor: name,
                n_dims: n_dims.into(),
            });
        }
        let mut shape = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            shape.push(cur.read_u64("dimension")?);
        }
        let type_id = cur.read_u32("tensor type")?;
        let offset = cur.read_u64("tensor data offset")?;
        let ty = QuantType::from_id(type_id).ok_or_else(|| GgufError::UnknownTensorType {
            tensor: name.clone(),
            type_id,
            offset: info_offset,
        })?;
        let n_bytes = tensor_n_bytes(&name, &shape, ty)?;
        if index.contains_key(&name) {
            return Err(GgufError::DuplicateTensor { tensor: name });
        }
        index.insert(name.clone(), tensors.len());
        tensors.push(TensorInfo {
            name,
            shape,
            ty,
            offset,
            n_bytes,
        });
    }
    Ok((tensors, index))
}

fn check_tensor_placement(
    tensors: &[TensorInfo],
    alignment: u64,
    data_offset: u64,
    file_size: u64,
) -> Result<(), GgufError> {
    for t in tensors {
        if t.offset % alignment != 0 {
            return Err(GgufError::MisalignedTensor {
                tensor: t.name.clone(),
                offset: t.offset,
                alignment,
            });
        }
        let end = data_offset
            .checked_add(t.offset)
            .and_then(|start| start.checked_add(t.n_bytes));
        let inside = matches!(end, Some(end) if end <= file_size);
        if !inside {
            return Err(GgufError::TensorOutOfBounds {
                tensor: t.name.clone(),
                offset: t.offset,
                n_bytes: t.n_bytes,
                data_offset,
                file_size,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_checks() {
        assert!(check_version(2).is_ok());
        assert!(check_version(3).is_ok());
        assert!(matches!(
            check_version(1),
            Err(GgufError::UnsupportedVersion { version: 1 })
        ));
        assert!(matches!(
            check_version(4),
            Err(GgufError::UnsupportedVersion { version: 4 })
        ));
        assert!(matches!(
            check_version(0x0300_0000),
            Err(GgufError::BigEndian { .. })
        ));
    }
}
