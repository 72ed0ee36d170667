//! Running llama.cpp's pre-tokenizer regexes with its exact semantics.
//!
//! llama.cpp matches them with C++ `std::regex`, which knows no Unicode
//! classes. So before matching it rewrites the text: when a pattern uses
//! `\p{L}`-style classes, every non-ASCII character becomes one stand-in per
//! category (letter, number, punctuation, mark, symbol, other) and non-ASCII
//! whitespace becomes a whitespace stand-in; `\p{X}` in the pattern becomes
//! "X's stand-in or an ASCII member of X". Patterns without such classes match
//! the text itself, with only non-ASCII whitespace replaced. That has visible
//! effects a Unicode regex would not have: `\p{Lu}` matches lowercase letters
//! too, and a literal U+3000 in a pattern never matches (the text's U+3000 is a
//! whitespace stand-in by then).
//!
//! We do the same rewrite, but with stand-ins of the same UTF-8 length as the
//! characters they replace, so byte offsets in the rewritten text are offsets
//! in the original. `std::regex` is ASCII-only where our engine is Unicode, so
//! `\d`, `\w` and `.` are spelled out as their ASCII meaning.

use crate::tokenizer::unicode::{self, Category};

/// Stand-in for a character of `category_index` (0 = other, then number,
/// letter, punctuation, mark, symbol) of UTF-8 length `len`. The two-byte ones
/// are C1 controls (never whitespace, letters or digits); the others are
/// private-use characters.
fn category_stand_in(category_index: u32, len: usize) -> char {
    let base = match len {
        2 => 0x90,
        3 => 0xE000,
        _ => 0xF0000,
    };
    char::from_u32(base + category_index).unwrap_or('\u{FFFD}')
}

/// Stand-in for non-ASCII whitespace of UTF-8 length `len` (2 or 3; no
/// whitespace character needs 4 bytes). Both are whitespace to `\s`.
fn whitespace_stand_in(len: usize) -> char {
    if len == 2 {
        '\u{A0}'
    } else {
        '\u{2000}'
    }
}

fn category_index(cat: Category) -> u32 {
    match cat {
        Category::Other | Category::Control => 0,
        Category::Number => 1,
        Category::Letter => 2,
        Category::Punctuation => 3,
        Category::Mark => 4,
        Category::Symbol => 5,
    }
}

/// Whether llama.cpp would collapse the text for `pattern`: it names one of
/// the categories it knows.
pub(super) fn uses_categories(pattern: &str) -> bool {
    class_names(pattern).any(|name| Category::from_class_name(name).is_some())
}

fn class_names(pattern: &str) -> impl Iterator<Item = &str> {
    pattern.match_indices(r"\p{").filter_map(move |(i, _)| {
        let rest = &pattern[i + 3..];
        rest.find('}').map(|end| &rest[..end])
    })
}

/// The text the regex sees, same byte length as `text`.
pub(super) fn stand_in_text(text: &str, collapse: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let len = c.len_utf8();
        out.push(if len == 1 {
            c
        } else if c.is_whitespace() {
            whitespace_stand_in(len)
        } else if collapse {
            category_stand_in(category_index(unicode::category(c)), len)
        } else {
            c
        });
    }
    debug_assert_eq!(out.len(), text.len());
    out
}

/// Rewrites an ECMAScript pattern for fancy-regex over [`stand_in_text`].
pub(super) fn translate(pattern: &str, collapse: bool) -> String {
    let mut out = String::with_capacity(pattern.len() * 2);
    let mut in_class = false;
    let mut chars = pattern.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                let Some((_, e)) = chars.next() else {
                    out.push('\\');
                    break;
                };
                let expanded = match e {
                    'p' if collapse => {
                        let name = class_names(&pattern[i..]).next().unwrap_or("");
                        Category::from_class_name(name).map(|cat| {
                            // Skip `{name}`.
                            for _ in 0..name.len() + 2 {
                                chars.next();
                            }
                            class_members(cat)
                        })
                    }
                    'd' => Some("0-9".to_owned()),
                    'w' => Some("0-9A-Za-z_".to_owned()),
                    _ => None,
                };
                match expanded {
                    Some(members) if in_class => out.push_str(&members),
                    Some(members) => {
                        out.push('[');
                        out.push_str(&members);
                        out.push(']');
                    }
                    None => {
                        out.push('\\');
                        out.push(e);
                    }
                }
            }
            '[' if !in_class => {
                in_class = true;
                out.push('[');
                if let Some(&(_, '^')) = chars.peek() {
                    chars.next();
                    out.push('^');
                }
            }
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            // Literal in an ECMAScript class, set operators (or nesting) in
            // ours.
            '[' | '&' | '~' if in_class => {
                out.push('\\');
                out.push(c);
            }
            // `std::regex`'s `.` also stops at `\r`.
            '.' if !in_class => out.push_str(r"[^\n\r]"),
            _ => out.push(c),
        }
    }
    out
}

/// The members of `\p{cat}` over stand-in text, for inside a class.
fn class_members(cat: Category) -> String {
    let k = category_index(cat);
    let mut s = String::new();
    for len in 2..=4 {
        s.push_str(&format!(
            r"\x{{{:X}}}",
            u32::from(category_stand_in(k, len))
        ));
    }
    for c in unicode::ascii_members(cat) {
        if c.is_ascii_alphanumeric() {
            s.push(c);
        } else {
            s.push_str(&format!(r"\x{:02X}", u32::from(c)));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stand_ins_keep_byte_offsets() {
        let text = "a Ä 我 🦙 \u{3000}\u{A0}x\u{301}½";
        for collapse in [false, true] {
            assert_eq!(stand_in_text(text, collapse).len(), text.len());
        }
        assert_eq!(stand_in_text("我", true), "\u{E002}");
        assert_eq!(stand_in_text("我\u{3000}", false), "我\u{2000}");
    }

    #[test]
    fn translation() {
        assert_eq!(translate(r"\d+.", false), r"[0-9]+[^\n\r]");
        assert_eq!(
            translate(r"[^\r\n\p{N}]", true),
            r"[^\r\n\x{91}\x{E001}\x{F0001}0123456789]"
        );
        assert_eq!(
            translate(r"\p{N}", true),
            r"[\x{91}\x{E001}\x{F0001}0123456789]"
        );
        assert_eq!(translate(r"[&\[]", false), r"[\&\[]");
        assert!(uses_categories(r"[\p{Lu}]") && !uses_categories(r"\p{Han}+"));
    }
}
