//! Writing GGUF v3 files, in memory or streamed tensor by tensor.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use super::error::GgufError;
use super::tensor::{align_up, tensor_n_bytes};
use super::value::{GgufValue, ValueType};
use super::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, GGUF_MAGIC, GGUF_VERSION, MAX_ARRAY_NESTING};
use crate::quant::QuantType;

#[derive(Clone)]
struct PlannedTensor {
    name: String,
    shape: Vec<u64>,
    ty: QuantType,
    n_bytes: u64,
    data: Option<Vec<u8>>,
}

// Manual so that debug output does not dump tensor data.
impl std::fmt::Debug for PlannedTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlannedTensor")
            .field("name", &self.name)
            .field("shape", &self.shape)
            .field("ty", &self.ty)
            .field("n_bytes", &self.n_bytes)
            .field("has_data", &self.data.is_some())
            .finish()
    }
}

/// Builds a GGUF v3 file.
///
/// Tensors are laid out in the order they were added, each padded to the
/// alignment (32, or `general.alignment` when that metadata is set as a u32).
/// Tensors given with [`add_tensor`](Self::add_tensor) carry their data; those
/// from [`declare_tensor`](Self::declare_tensor) get it later through
/// [`stream_to`](Self::stream_to), so a large model never has to be in memory
/// at once.
#[derive(Debug, Clone, Default)]
pub struct GgufWriter {
    metadata: Vec<(String, GgufValue)>,
    tensors: Vec<PlannedTensor>,
    names: HashSet<String>,
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets a metadata entry. Setting a key again replaces its value and keeps
    /// its original position, since a file cannot hold a key twice.
    pub fn add_metadata(&mut self, key: &str, value: GgufValue) {
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = value,
            None => self.metadata.push((key.to_owned(), value)),
        }
    }

    /// Adds a tensor with its data, which must be exactly the size its shape
    /// and type imply.
    pub fn add_tensor(
        &mut self,
        name: &str,
        shape: &[u64],
        ty: QuantType,
        data: Vec<u8>,
    ) -> Result<(), GgufError> {
        let mut planned = self.plan(name, shape, ty)?;
        if data.len() as u64 != planned.n_bytes {
            return Err(GgufError::DataLength {
                tensor: name.to_owned(),
                expected: planned.n_bytes,
                actual: data.len() as u64,
            });
        }
        planned.data = Some(data);
        self.push(planned);
        Ok(())
    }

    /// Adds a tensor whose data will be supplied through [`GgufStream`].
    pub fn declare_tensor(
        &mut self,
        name: &str,
        shape: &[u64],
        ty: QuantType,
    ) -> Result<(), GgufError> {
        let planned = self.plan(name, shape, ty)?;
        self.push(planned);
        Ok(())
    }

    fn plan(&self, name: &str, shape: &[u64], ty: QuantType) -> Result<PlannedTensor, GgufError> {
        if self.names.contains(name) {
            return Err(GgufError::DuplicateTensor {
                tensor: name.to_owned(),
            });
        }
        Ok(PlannedTensor {
            name: name.to_owned(),
            shape: shape.to_vec(),
            ty,
            n_bytes: tensor_n_bytes(name, shape, ty)?,
            data: None,
        })
    }

    fn push(&mut self, planned: PlannedTensor) {
        self.names.insert(planned.name.clone());
        self.tensors.push(planned);
    }

    /// The whole file in memory. Every tensor must have data.
    pub fn to_bytes(&self) -> Result<Vec<u8>, GgufError> {
        self.check_all_data()?;
        let mut out = Vec::new();
        self.write_complete(&mut out)?;
        Ok(out)
    }

    /// Writes the whole file to `path`. Every tensor must have data.
    pub fn write_to_path(&self, path: &Path) -> Result<(), GgufError> {
        self.check_all_data()?;
        let what = || format!("writing {}", path.display());
        let file = File::create(path).map_err(|source| GgufError::Io {
            what: what(),
            source,
        })?;
        let mut w = BufWriter::new(file);
        self.write_complete(&mut w)?;
        w.flush().map_err(|source| GgufError::Io {
            what: what(),
            source,
        })
    }

    fn check_all_data(&self) -> Result<(), GgufError> {
        match self.tensors.iter().find(|t| t.data.is_none()) {
            Some(t) => Err(GgufError::MissingTensorData {
                tensor: t.name.clone(),
            }),
            None => Ok(()),
        }
    }

    fn write_complete<W: Write>(&self, w: &mut W) -> Result<(), GgufError> {
        let (header, alignment) = self.encode_header()?;
        write_bytes(w, &header, "writing the GGUF header")?;
        for t in &self.tensors {
            let data = t.data.as_deref().unwrap_or_default();
            write_tensor_data(w, &t.name, data, alignment)?;
        }
        Ok(())
    }

    /// Writes the header to `w` and returns a stream that takes the declared
    /// tensors' data in declaration order. Tensors that already have data
    /// (from `add_tensor`) are written as soon as their turn comes.
    pub fn stream_to<W: Write>(self, mut w: W) -> Result<GgufStream<W>, GgufError> {
        let (header, alignment) = self.encode_header()?;
        write_bytes(&mut w, &header, "writing the GGUF header")?;
        let mut stream = GgufStream {
            w,
            tensors: self.tensors,
            next: 0,
            alignment,
        };
        stream.write_ready()?;
        Ok(stream)
    }

    fn alignment(&self) -> Result<u64, GgufError> {
        match self.metadata.iter().find(|(k, _)| k == ALIGNMENT_KEY) {
            None => Ok(DEFAULT_ALIGNMENT),
            // llama.cpp reads the alignment only as a u32, so insist on that type.
            Some((_, GgufValue::U32(a))) if a.is_power_of_two() => Ok((*a).into()),
            Some((_, other)) => Err(GgufError::InvalidAlignment {
                found: other.brief(),
            }),
        }
    }

    /// Everything before the data section, and the alignment.
    fn encode_header(&self) -> Result<(Vec<u8>, u64), GgufError> {
        let alignment = self.alignment()?;
        let mut buf = Vec::new();
        buf.extend_from_slice(&GGUF_MAGIC);
        buf.extend_from_slice(&GGUF_VERSION.to_le_bytes());
        buf.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        buf.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            encode_str(&mut buf, key);
            buf.extend_from_slice(&ValueType::of(value).id().to_le_bytes());
            encode_value(&mut buf, key, value, 0)?;
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            encode_str(&mut buf, &t.name);
            buf.extend_from_slice(&(t.shape.len() as u32).to_le_bytes());
            for &d in &t.shape {
                buf.extend_from_slice(&d.to_le_bytes());
            }
            buf.extend_from_slice(&t.ty.id().to_le_bytes());
            buf.extend_from_slice(&offset.to_le_bytes());
            offset = offset
                .checked_add(t.n_bytes)
                .and_then(|end| align_up(end, alignment))
                .ok_or_else(|| GgufError::ShapeOverflow {
                    tensor: t.name.clone(),
                    shape: t.shape.clone(),
                })?;
        }
        // Without tensors there is no data section to align; llama.cpp's tools
        // end such (vocab-only) files right after the header too.
        if !self.tensors.is_empty() {
            let padded = align_up(buf.len() as u64, alignment).unwrap_or(u64::MAX);
            buf.resize(padded as usize, 0);
        }
        Ok((buf, alignment))
    }
}

fn encode_str(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
    buf.extend_from_slice(s.as_bytes());
}

/// Appends `value` without its type id (the caller wrote it, or the enclosing
/// array declares it). `depth` counts the arrays enclosing `value`.
fn encode_value(
    buf: &mut Vec<u8>,
    key: &str,
    value: &GgufValue,
    depth: usize,
) -> Result<(), GgufError> {
    match value {
        GgufValue::U8(v) => buf.push(*v),
        GgufValue::I8(v) => buf.extend_from_slice(&v.to_le_bytes()),
        GgufValue::U16(v) => buf.extend_from_slice(&v.to_le_bytes()),
        GgufValue::I16(v) => buf.extend_from_slice(&v.to_le_bytes()),
        GgufValue::U32(v) => buf.extend_from_slice(&v.to_le_bytes()),
        GgufValue::I32(v) => buf.extend_from_slice(&v.to_le_bytes()),
        GgufValue::F32(v) => buf.extend_from_slice(&v.to_le_bytes()),
        GgufValue::Bool(v) => buf.push(u8::from(*v)),
        GgufValue::String(s) => encode_str(buf, s),
        GgufValue::U64(v) => buf.extend_from_slice(&v.to_le_bytes()),
        GgufValue::I64(v) => buf.extend_from_slice(&v.to_le_bytes()),
        GgufValue::F64(v) => buf.extend_from_slice(&v.to_le_bytes()),
        GgufValue::Array(items) => {
            // The reader would refuse deeper nesting; refuse to write it.
            if depth + 1 > MAX_ARRAY_NESTING {
                return Err(GgufError::NestingTooDeep {
                    max: MAX_ARRAY_NESTING,
                    at: format!("the value of metadata key '{key}'"),
                    offset: buf.len() as u64,
                });
            }
            // The element type of an empty array is not kept; u8 is as good
            // as any.
            let elem_ty = items.first().map_or(ValueType::U8, ValueType::of);
            if let Some(other) = items.iter().find(|v| ValueType::of(v) != elem_ty) {
                return Err(GgufError::MixedArray {
                    key: key.to_owned(),
                    first: elem_ty.name(),
                    other: other.type_name(),
                });
            }
            buf.extend_from_slice(&elem_ty.id().to_le_bytes());
            buf.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                encode_value(buf, key, item, depth + 1)?;
            }
        }
    }
    Ok(())
}

fn write_bytes<W: Write>(w: &mut W, bytes: &[u8], what: &str) -> Result<(), GgufError> {
    w.write_all(bytes).map_err(|source| GgufError::Io {
        what: what.to_owned(),
        source,
    })
}

/// Writes `data` and the zero padding that brings it to a multiple of
/// `alignment`.
fn write_tensor_data<W: Write>(
    w: &mut W,
    name: &str,
    data: &[u8],
    alignment: u64,
) -> Result<(), GgufError> {
    const ZEROS: [u8; 4096] = [0; 4096];
    let what = || format!("writing the data of tensor '{name}'");
    w.write_all(data).map_err(|source| GgufError::Io {
        what: what(),
        source,
    })?;
    let len = data.len() as u64;
    let mut pad = align_up(len, alignment).unwrap_or(len) - len;
    while pad > 0 {
        let n = pad.min(ZEROS.len() as u64);
        w.write_all(&ZEROS[..n as usize])
            .map_err(|source| GgufError::Io {
                what: what(),
                source,
            })?;
        pad -= n;
    }
    Ok(())
}

/// A GGUF file whose header has been written and whose tensor data is being
/// streamed in declaration order. Dropping it before [`finish`](Self::finish)
/// leaves an incomplete file.
#[derive(Debug)]
pub struct GgufStream<W: Write> {
    w: W,
    tensors: Vec<PlannedTensor>,
    next: usize,
    alignment: u64,
}

impl<W: Write> GgufStream<W> {
    /// The data of the next declared tensor. Its length is checked before
    /// anything is written, so a wrong-sized buffer can be retried.
    pub fn write_tensor(&mut self, data: &[u8]) -> Result<(), GgufError> {
        let Some(t) = self.tensors.get(self.next) else {
            return Err(GgufError::NoTensorPending {
                len: data.len() as u64,
            });
        };
        if data.len() as u64 != t.n_bytes {
            return Err(GgufError::DataLength {
                tensor: t.name.clone(),
                expected: t.n_bytes,
                actual: data.len() as u64,
            });
        }
        write_tensor_data(&mut self.w, &t.name, data, self.alignment)?;
        self.next += 1;
        self.write_ready()
    }

    /// Name of the tensor the next [`write_tensor`](Self::write_tensor) is for.
    pub fn next_tensor(&self) -> Option<&str> {
        self.tensors.get(self.next).map(|t| t.name.as_str())
    }

    /// Writes the tensors from the current position on that already have data.
    fn write_ready(&mut self) -> Result<(), GgufError> {
        while let Some(t) = self.tensors.get_mut(self.next) {
            let Some(data) = t.data.take() else {
                break;
            };
            write_tensor_data(&mut self.w, &t.name, &data, self.alignment)?;
            self.next += 1;
        }
        Ok(())
    }

    /// Checks every tensor was written, flushes, and hands back the writer.
    pub fn finish(mut self) -> Result<W, GgufError> {
        if let Some(t) = self.tensors.get(self.next) {
            return Err(GgufError::MissingTensorData {
                tensor: t.name.clone(),
            });
        }
        self.w.flush().map_err(|source| GgufError::Io {
            what: "flushing the GGUF stream".to_owned(),
            source,
        })?;
        Ok(self.w)
    }
}
