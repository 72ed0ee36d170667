//! A parsed GGUF file that owns its bytes (a memory map or a buffer).

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::ops::Range;
use std::path::Path;

use memmap2::Mmap;

use super::error::GgufError;
use super::parse::{parse_header, Header};
use super::tensor::TensorInfo;
use super::value::GgufValue;

enum Storage {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mapped(m) => m,
            Storage::Owned(v) => v,
        }
    }
}

pub struct GgufFile {
    storage: Storage,
    version: u32,
    metadata: Vec<(String, GgufValue)>,
    key_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    alignment: u64,
    data_offset: u64,
}

impl GgufFile {
    /// Maps the file and parses its header; tensor data stays on disk until
    /// touched.
    pub fn open(path: &Path) -> Result<GgufFile, GgufError> {
        let io_err = |source| GgufError::Io {
            what: format!("opening {}", path.display()),
            source,
        };
        let file = File::open(path).map_err(io_err)?;
        let len = file.metadata().map_err(io_err)?.len();
        let storage = if len == 0 {
            // Some platforms refuse empty mappings; an empty buffer parses to
            // the same "truncated" error.
            Storage::Owned(Vec::new())
        } else {
            // SAFETY: the map is read-only. If another process truncates or
            // rewrites the file while it is mapped, reads may fault or see new
            // bytes; like every mmap-based model loader we accept that rather
            // than copying gigabytes of weights into memory.
            Storage::Mapped(unsafe { Mmap::map(&file) }.map_err(|source| GgufError::Io {
                what: format!("memory-mapping {}", path.display()),
                source,
            })?)
        };
        Self::from_storage(storage)
    }

    /// Parses a file held in memory (tests, generated files).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        Self::from_storage(Storage::Owned(bytes))
    }

    /// Tells the OS that the mapped pages wholly inside `range` (byte
    /// offsets in the file) are not needed now: they leave the process's
    /// resident set and are read from the file again if touched. A backend
    /// that copied a tensor elsewhere (the CPU backend's repacked Q4_0) calls
    /// this so the copy does not count twice. A no-op for in-memory files
    /// and where the OS declines.
    pub fn release_pages(&self, range: Range<u64>) {
        let Storage::Mapped(map) = &self.storage else {
            return;
        };
        const PAGE: u64 = 4096;
        let end = range.end.min(map.len() as u64) / PAGE * PAGE;
        let start = range.start.next_multiple_of(PAGE);
        if start < end {
            // SAFETY: the mapping is shared and read-only, so dropping its
            // pages loses nothing: the next read maps the file's bytes again.
            let _ = unsafe {
                map.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    start as usize,
                    (end - start) as usize,
                )
            };
        }
    }

    fn from_storage(storage: Storage) -> Result<GgufFile, GgufError> {
        let Header {
            version,
            metadata,
            key_index,
            tensors,
            tensor_index,
            alignment,
            data_offset,
        } = parse_header(storage.bytes())?;
        Ok(GgufFile {
            storage,
            version,
            metadata,
            key_index,
            tensors,
            tensor_index,
            alignment,
            data_offset,
        })
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    /// All key/value pairs in file order.
    pub fn metadata(&self) -> &[(String, GgufValue)] {
        &self.metadata
    }

    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.key_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// All tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The bytes of a tensor of this file. Its range was checked at parse
    /// time; an info that does not belong to this file and points outside it
    /// yields an empty slice rather than a panic.
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        let range = self
            .data_offset
            .checked_add(t.offset)
            .and_then(|start| Some((start, start.checked_add(t.n_bytes)?)))
            .and_then(|(start, end)| {
                Some(usize::try_from(start).ok()?..usize::try_from(end).ok()?)
            });
        range
            .and_then(|r| self.storage.bytes().get(r))
            .unwrap_or(&[])
    }

    /// The data of the named tensor, if the file has it.
    pub fn tensor_bytes(&self, name: &str) -> Option<&[u8]> {
        self.tensor(name).map(|t| self.tensor_data(t))
    }

    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute byte offset of the data section (tensor offsets are relative to
    /// it). A file without tensors may end before it.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    pub fn file_size(&self) -> u64 {
        self.storage.bytes().len() as u64
    }

    /// The whole file.
    pub fn as_bytes(&self) -> &[u8] {
        self.storage.bytes()
    }

    /// `general.architecture`, e.g. `"llama"`.
    pub fn architecture(&self) -> Option<&str> {
        self.get("general.architecture").and_then(GgufValue::as_str)
    }
}

impl fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("architecture", &self.architecture())
            .field("n_metadata", &self.metadata.len())
            .field("n_tensors", &self.tensors.len())
            .field("alignment", &self.alignment)
            .field("data_offset", &self.data_offset)
            .field("file_size", &self.file_size())
            .finish()
    }
}
