//! GPT-2's reversible byte → character mapping.
//!
//! Byte-level BPE vocabularies store every token as text in which each byte of
//! the original UTF-8 is replaced by one printable character: the printable
//! Latin-1 bytes stand for themselves and the other 68 bytes (controls, space,
//! NBSP, soft hyphen, ...) are moved to U+0100.. in byte order. That keeps merge
//! rules free of spaces and control characters.

/// Bytes that map to the code point of the same value.
fn is_self_mapped(b: u8) -> bool {
    matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// Number of bytes moved above U+00FF.
const N_MOVED: usize = 68;

/// The mapping in both directions, built once per tokenizer.
#[derive(Debug, Clone)]
pub(crate) struct ByteLevel {
    to_char: [char; 256],
    /// Indexed by code point, for code points below `0x100 + N_MOVED`.
    from_char: Vec<Option<u8>>,
}

impl ByteLevel {
    pub(crate) fn new() -> Self {
        let mut to_char = ['\0'; 256];
        let mut from_char = vec![None; 0x100 + N_MOVED];
        let mut next_moved = 0x100u32;
        for b in 0..=255u8 {
            let cp = if is_self_mapped(b) {
                u32::from(b)
            } else {
                next_moved += 1;
                next_moved - 1
            };
            // Every value here is below 0x144, far from the surrogate range.
            let c = char::from_u32(cp).unwrap_or('\u{FFFD}');
            to_char[usize::from(b)] = c;
            from_char[cp as usize] = Some(b);
        }
        debug_assert_eq!(next_moved as usize, 0x100 + N_MOVED);
        ByteLevel { to_char, from_char }
    }

    /// Appends the byte-level form of `text` to `out`.
    pub(crate) fn encode_into(&self, text: &str, out: &mut String) {
        out.reserve(text.len() * 2);
        for &b in text.as_bytes() {
            out.push(self.to_char[usize::from(b)]);
        }
    }

    /// The byte a byte-level character stands for, if it is one.
    pub(crate) fn byte_of(&self, c: char) -> Option<u8> {
        self.from_char.get(c as usize).copied().flatten()
    }

    /// Undoes [`Self::encode_into`]. Characters outside the mapping (possible
    /// only in a hand-edited vocabulary) are kept as their own UTF-8.
    pub(crate) fn decode_into(&self, text: &str, out: &mut Vec<u8>) {
        for c in text.chars() {
            match self.byte_of(c) {
                Some(b) => out.push(b),
                None => {
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_gpt2_characters() {
        let bl = ByteLevel::new();
        let mut s = String::new();
        bl.encode_into(" \n\ta!", &mut s);
        // Space is byte 0x20, the 33rd moved byte (0x00..=0x20) → U+0120 'Ġ';
        // newline 0x0A → U+010A 'Ċ'; tab 0x09 → U+0109 'ĉ'.
        assert_eq!(s, "Ġ\u{10A}\u{109}a!");
        assert_eq!(bl.byte_of('Ġ'), Some(b' '));
        // 0x7F..=0xA0 follow the 33 low bytes; 0xAD is the last moved byte.
        assert_eq!(bl.byte_of('\u{121}'), Some(0x7F));
        assert_eq!(bl.byte_of('\u{143}'), Some(0xAD));
        assert_eq!(bl.byte_of('\u{144}'), None);
        assert_eq!(bl.byte_of('é'), Some(0xE9));
    }

    #[test]
    fn round_trips_all_bytes() {
        let bl = ByteLevel::new();
        let all: Vec<u8> = (0..=255).collect();
        let mut encoded = String::new();
        for &b in &all {
            encoded.push(bl.to_char[usize::from(b)]);
        }
        let mut back = Vec::new();
        bl.decode_into(&encoded, &mut back);
        assert_eq!(back, all);
    }
}
