//! Token → bytes for output, and a streaming decoder that only ever emits
//! whole UTF-8 characters.

use super::byte_level::ByteLevel;
use super::spm::SPACE_MARK;
use super::vocab::{Attr, Vocab};

/// The printable bytes of every token, computed once at load (as llama.cpp's
/// piece cache) so decoding is a table lookup.
#[derive(Debug, Clone, Default)]
pub(crate) struct PieceTable {
    bytes: Vec<u8>,
    /// `offsets[id]..offsets[id + 1]` is the piece of `id`.
    offsets: Vec<usize>,
}

impl PieceTable {
    /// `byte_level` is `Some` for GPT-2 style vocabularies, `None` for
    /// SentencePiece ones whose tokens spell spaces as U+2581.
    pub(crate) fn build(vocab: &Vocab, byte_level: Option<&ByteLevel>) -> PieceTable {
        let mut bytes = Vec::new();
        let mut offsets = Vec::with_capacity(vocab.len() + 1);
        offsets.push(0);
        for (id, text) in vocab.texts() {
            let attr = vocab.attr(id);
            if attr.any(Attr::CONTROL.union(Attr::UNKNOWN)) {
                // Hidden unless rendering specials, which uses the raw text.
            } else if attr.any(Attr::USER_DEFINED) {
                bytes.extend_from_slice(text.as_bytes());
            } else if attr.any(Attr::NORMAL) {
                match byte_level {
                    Some(bl) => bl.decode_into(text, &mut bytes),
                    None => {
                        for c in text.chars() {
                            if c == SPACE_MARK {
                                bytes.push(b' ');
                            } else {
                                let mut buf = [0u8; 4];
                                bytes.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                            }
                        }
                    }
                }
            } else if attr.any(Attr::BYTE) {
                bytes.extend(parse_byte_token(text));
            }
            // Unused and undefined tokens print nothing.
            offsets.push(bytes.len());
        }
        PieceTable { bytes, offsets }
    }

    pub(crate) fn get(&self, id: u32) -> &[u8] {
        let i = id as usize;
        match (self.offsets.get(i), self.offsets.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.bytes[a..b],
            _ => &[],
        }
    }
}

/// The byte of a `<0xXX>` token; anything else names no byte.
fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// Turns a stream of token ids into text without ever splitting a character:
/// bytes of an incomplete UTF-8 sequence wait for the next token. Bytes that
/// can never become valid UTF-8 come out as U+FFFD at once.
#[derive(Debug, Clone, Default)]
pub struct StreamDecoder {
    pending: Vec<u8>,
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one token and returns the text that is now complete (often empty
    /// while a multi-byte character is split across byte tokens).
    pub fn push(&mut self, tok: &super::Tokenizer, id: u32) -> String {
        self.push_bytes(&tok.token_to_piece(id))
    }

    /// Adds raw piece bytes; [`Self::push`] for callers that already have them.
    pub fn push_bytes(&mut self, piece: &[u8]) -> String {
        self.pending.extend_from_slice(piece);
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    // `valid` is valid UTF-8 by the error's own report.
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        // Truncated sequence at the end: wait for more bytes.
                        None => {
                            rest = after;
                            break;
                        }
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[n..];
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        let drop = self.pending.len() - keep;
        self.pending.drain(..drop);
        out
    }

    /// Ends the stream: whatever is still buffered comes out, an unfinished
    /// character as U+FFFD.
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_tokens_parse_strictly() {
        assert_eq!(parse_byte_token("<0x0A>"), Some(10));
        assert_eq!(parse_byte_token("<0xff>"), Some(255));
        assert_eq!(parse_byte_token("<0x1>"), None);
        assert_eq!(parse_byte_token("<0xZZ>"), None);
        assert_eq!(parse_byte_token("0x41"), None);
    }

    #[test]
    fn stream_holds_split_characters() {
        let mut d = StreamDecoder::new();
        let crab = "🦀".as_bytes();
        assert_eq!(d.push_bytes(b"a"), "a");
        assert_eq!(d.push_bytes(&crab[..1]), "");
        assert_eq!(d.push_bytes(&crab[1..3]), "");
        assert_eq!(d.push_bytes(&[crab[3], b'b']), "🦀b");
        assert_eq!(d.finish(), "");
    }

    #[test]
    fn stream_replaces_invalid_and_flushes_unfinished() {
        let mut d = StreamDecoder::new();
        // 0xFF can never start a character; 0xE4 0xB8 starts one.
        assert_eq!(d.push_bytes(&[b'x', 0xFF, 0xE4, 0xB8]), "x\u{FFFD}");
        assert_eq!(d.finish(), "\u{FFFD}");
        assert_eq!(d.finish(), "");
        // A lead byte followed by a non-continuation is invalid at once.
        assert_eq!(d.push_bytes(&[0xE4, b'y']), "\u{FFFD}y");
    }
}
