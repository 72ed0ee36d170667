//! The AMDGPU metadata of a code object: per kernel, the registers, spills,
//! scratch and LDS the compiler assigned, as `llvm-readobj --notes` prints
//! them. The code object is an ELF file; the metadata is a note of type
//! NT_AMDGPU_METADATA (32), owner "AMDGPU", whose payload is a MessagePack
//! map (code object v3 and later):
//!
//! ```text
//! { "amdhsa.version": [1, 2], "amdhsa.target": "amdgcn-amd-amdhsa--gfx1100",
//!   "amdhsa.kernels": [ { ".name": "rmsnorm_f32", ".vgpr_count": 14, ... } ] }
//! ```

use object::elf::{FileHeader64, EM_AMDGPU};
use object::read::elf::{FileHeader, SectionHeader};
use object::LittleEndian;
use rmpv::Value;

/// ELF note type of the msgpack metadata (LLVM's `NT_AMDGPU_METADATA`).
pub const NT_AMDGPU_METADATA: u32 = 32;

/// What the compiler assigned to one kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelMetadata {
    pub name: String,
    pub vgpr_count: u32,
    pub sgpr_count: u32,
    pub vgpr_spill_count: u32,
    pub sgpr_spill_count: u32,
    /// Scratch (private) bytes per work-item: spills and stack arrays.
    pub private_segment_fixed_size: u32,
    /// Static LDS (`__shared__`) bytes per workgroup.
    pub group_segment_fixed_size: u32,
    pub wavefront_size: u32,
    /// The launch bound (`LAUNCH_BOUNDS` in the prelude); 1024 if none.
    pub max_flat_workgroup_size: u32,
}

/// The metadata of one code object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeObjectMetadata {
    /// `amdgcn-amd-amdhsa--gfx1100` (with feature flags where set).
    pub target: String,
    pub kernels: Vec<KernelMetadata>,
}

impl CodeObjectMetadata {
    pub fn kernel(&self, name: &str) -> Option<&KernelMetadata> {
        self.kernels.iter().find(|k| k.name == name)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("not an AMDGPU code object: {0}")]
    NotCodeObject(String),
    #[error("the code object has no AMDGPU metadata note (NT_AMDGPU_METADATA)")]
    NoMetadata,
    #[error("AMDGPU metadata is not valid MessagePack: {0}")]
    Msgpack(String),
    #[error("AMDGPU metadata: {0}")]
    Malformed(String),
}

impl From<object::Error> for MetadataError {
    fn from(e: object::Error) -> Self {
        MetadataError::NotCodeObject(e.to_string())
    }
}

/// Parses the metadata note of a code object (64-bit little-endian ELF,
/// machine EM_AMDGPU).
pub fn parse(code_object: &[u8]) -> Result<CodeObjectMetadata, MetadataError> {
    let desc = metadata_note(code_object)?;
    let value = rmpv::decode::read_value(&mut &desc[..])
        .map_err(|e| MetadataError::Msgpack(e.to_string()))?;
    let target = field(&value, "amdhsa.target")
        .and_then(Value::as_str)
        .ok_or_else(|| MetadataError::Malformed("no amdhsa.target".into()))?
        .to_string();
    let kernels = field(&value, "amdhsa.kernels")
        .and_then(Value::as_array)
        .ok_or_else(|| MetadataError::Malformed("no amdhsa.kernels".into()))?
        .iter()
        .map(kernel)
        .collect::<Result<_, _>>()?;
    Ok(CodeObjectMetadata { target, kernels })
}

/// The payload of the NT_AMDGPU_METADATA note, from the ELF's note
/// sections.
fn metadata_note(data: &[u8]) -> Result<&[u8], MetadataError> {
    let header = FileHeader64::<LittleEndian>::parse(data)?;
    let endian = header.endian()?;
    if header.e_machine(endian) != EM_AMDGPU {
        return Err(MetadataError::NotCodeObject(format!(
            "ELF machine {}, not EM_AMDGPU ({EM_AMDGPU})",
            header.e_machine(endian)
        )));
    }
    let sections = header.sections(endian, data)?;
    for section in sections.iter() {
        let Some(mut notes) = section.notes(endian, data)? else {
            continue;
        };
        while let Some(note) = notes.next()? {
            if note.name() == b"AMDGPU" && note.n_type(endian) == NT_AMDGPU_METADATA {
                return Ok(note.desc());
            }
        }
    }
    Err(MetadataError::NoMetadata)
}

/// A string-keyed entry of a msgpack map.
fn field<'a>(map: &'a Value, key: &str) -> Option<&'a Value> {
    map.as_map()?
        .iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
}

fn kernel(value: &Value) -> Result<KernelMetadata, MetadataError> {
    let name = field(value, ".name")
        .and_then(Value::as_str)
        .ok_or_else(|| MetadataError::Malformed("a kernel without .name".into()))?
        .to_string();
    let num = |key: &str| -> Result<u32, MetadataError> {
        field(value, key)
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| MetadataError::Malformed(format!("kernel {name}: no {key}")))
    };
    Ok(KernelMetadata {
        vgpr_count: num(".vgpr_count")?,
        sgpr_count: num(".sgpr_count")?,
        vgpr_spill_count: num(".vgpr_spill_count")?,
        sgpr_spill_count: num(".sgpr_spill_count")?,
        private_segment_fixed_size: num(".private_segment_fixed_size")?,
        group_segment_fixed_size: num(".group_segment_fixed_size")?,
        wavefront_size: num(".wavefront_size")?,
        max_flat_workgroup_size: num(".max_flat_workgroup_size")?,
        name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_non_elf() {
        assert!(matches!(
            parse(b"not an elf file at all, clearly"),
            Err(MetadataError::NotCodeObject(_))
        ));
    }

    #[test]
    fn reads_msgpack_fields() {
        let k = Value::Map(vec![
            (Value::from(".name"), Value::from("k")),
            (Value::from(".vgpr_count"), Value::from(14)),
            (Value::from(".sgpr_count"), Value::from(18)),
            (Value::from(".vgpr_spill_count"), Value::from(0)),
            (Value::from(".sgpr_spill_count"), Value::from(0)),
            (Value::from(".private_segment_fixed_size"), Value::from(0)),
            (Value::from(".group_segment_fixed_size"), Value::from(64)),
            (Value::from(".wavefront_size"), Value::from(32)),
            (Value::from(".max_flat_workgroup_size"), Value::from(256)),
        ]);
        let m = kernel(&k).unwrap();
        assert_eq!(
            (m.name.as_str(), m.vgpr_count, m.group_segment_fixed_size),
            ("k", 14, 64)
        );
        let Value::Map(mut entries) = k else {
            unreachable!()
        };
        entries.retain(|(key, _)| key.as_str() != Some(".vgpr_count"));
        let err = kernel(&Value::Map(entries)).unwrap_err().to_string();
        assert_eq!(err, "AMDGPU metadata: kernel k: no .vgpr_count");
    }
}
