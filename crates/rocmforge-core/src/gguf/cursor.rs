//! Bounds-checked little-endian reads over the file bytes.
//!
//! The cursor knows which part of the file it is in ([`Place`]) so that every
//! error it raises can say where, without the parser threading context through
//! each call.

use std::fmt;

use super::error::GgufError;

/// The part of the file being parsed, for error messages.
#[derive(Clone, Debug)]
pub(crate) enum Place {
    Header,
    /// The key of the metadata entry with this index; its name is not known yet.
    KeyName(u64),
    Value(String),
    /// The name of the tensor info with this index.
    TensorName(u64),
    Tensor(String),
}

/// Names are escaped: a hostile file's key or tensor name may hold line
/// breaks, and every error message must stay on one line.
impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Header => f.write_str("the header"),
            Place::KeyName(i) => write!(f, "the key of metadata entry #{i}"),
            Place::Value(key) => {
                write!(f, "the value of metadata key '{}'", key.escape_debug())
            }
            Place::TensorName(i) => write!(f, "the name of tensor info #{i}"),
            Place::Tensor(name) => write!(f, "the info of tensor '{}'", name.escape_debug()),
        }
    }
}

pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    pub(crate) place: Place,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Cursor {
            bytes,
            pos: 0,
            place: Place::Header,
        }
    }

    pub(crate) fn offset(&self) -> u64 {
        self.pos as u64
    }

    pub(crate) fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    pub(crate) fn file_size(&self) -> u64 {
        self.bytes.len() as u64
    }

    pub(crate) fn at(&self) -> String {
        self.place.to_string()
    }

    /// The next `n` bytes, or a `Truncated` error naming `what`.
    pub(crate) fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what,
                at: self.at(),
                offset: self.offset(),
                needed: n,
                file_size: self.file_size(),
            });
        }
        // n <= remaining <= usize::MAX, so the conversion is exact.
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.bytes[start..self.pos])
    }

    fn take_array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], GgufError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N as u64, what)?);
        Ok(out)
    }

    pub(crate) fn read_u8(&mut self, what: &'static str) -> Result<u8, GgufError> {
        Ok(self.take_array::<1>(what)?[0])
    }

    pub(crate) fn read_u16(&mut self, what: &'static str) -> Result<u16, GgufError> {
        self.take_array(what).map(u16::from_le_bytes)
    }

    pub(crate) fn read_u32(&mut self, what: &'static str) -> Result<u32, GgufError> {
        self.take_array(what).map(u32::from_le_bytes)
    }

    pub(crate) fn read_u64(&mut self, what: &'static str) -> Result<u64, GgufError> {
        self.take_array(what).map(u64::from_le_bytes)
    }

    /// Fails unless `count` items of at least `min_size` bytes each could fit in
    /// the rest of the file. Called before allocating for `count` items, so a
    /// bogus count cannot trigger a huge allocation.
    pub(crate) fn check_count(
        &self,
        what: &'static str,
        count: u64,
        min_size: u64,
        count_offset: u64,
    ) -> Result<(), GgufError> {
        let fits = count
            .checked_mul(min_size)
            .is_some_and(|bytes| bytes <= self.remaining());
        if fits {
            Ok(())
        } else {
            Err(GgufError::CountTooLarge {
                what,
                at: self.at(),
                offset: count_offset,
                count,
                remaining: self.remaining(),
            })
        }
    }

    /// A u64 length followed by that many bytes of UTF-8.
    pub(crate) fn read_string(&mut self, what: &'static str) -> Result<String, GgufError> {
        let len_offset = self.offset();
        let len = self.read_u64(what)?;
        self.check_count(what, len, 1, len_offset)?;
        let text_offset = self.offset();
        let bytes = self.take(len, what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(e) => Err(GgufError::InvalidUtf8 {
                what,
                at: self.at(),
                offset: text_offset + e.valid_up_to() as u64,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_little_endian_and_stops_at_the_end() {
        let bytes = [1u8, 2, 3, 4, 5, 6, 7];
        let mut c = Cursor::new(&bytes);
        assert_eq!(c.read_u16("a").unwrap(), 0x0201);
        assert_eq!(c.read_u32("b").unwrap(), 0x0605_0403);
        match c.read_u32("c") {
            Err(GgufError::Truncated {
                offset: 6,
                needed: 4,
                file_size: 7,
                ..
            }) => {}
            other => panic!("expected Truncated, got {other:?}"),
        }
        // A failed read consumes nothing.
        assert_eq!(c.read_u8("d").unwrap(), 7);
    }

    #[test]
    fn huge_string_length_fails_before_allocating() {
        let mut bytes = (1u64 << 63).to_le_bytes().to_vec();
        bytes.extend_from_slice(b"abc");
        let mut c = Cursor::new(&bytes);
        match c.read_string("s") {
            Err(GgufError::CountTooLarge {
                count, remaining, ..
            }) => {
                assert_eq!(count, 1 << 63);
                assert_eq!(remaining, 3);
            }
            other => panic!("expected CountTooLarge, got {other:?}"),
        }
    }

    #[test]
    fn invalid_utf8_reports_the_bad_byte() {
        let mut bytes = 3u64.to_le_bytes().to_vec();
        bytes.extend_from_slice(&[b'a', 0xff, b'b']);
        match Cursor::new(&bytes).read_string("s") {
            Err(GgufError::InvalidUtf8 { offset: 9, .. }) => {}
            other => panic!("expected InvalidUtf8 at 9, got {other:?}"),
        }
    }
}
