//! Unicode general categories, as llama.cpp's tokenizers use them: one coarse
//! category per code point (number, letter, punctuation, mark, symbol, control,
//! or none of those).
//!
//! The tables come from `regex-syntax`, the same Unicode data the pre-tokenizer
//! regexes run with, so a character's category here and its `\p{..}` class
//! there never disagree.

use std::sync::OnceLock;

use regex_syntax::hir::{Class, HirKind};

/// The coarse category of a code point. The discriminants are the order of
/// llama.cpp's collapsed stand-in bytes (`0xD0 + n`), which `collapse` mirrors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Category {
    /// Separators, unassigned code points and anything else.
    Other = 0,
    Number = 1,
    Letter = 2,
    Punctuation = 3,
    /// `\p{M}`: combining marks (accents).
    Mark = 4,
    Symbol = 5,
    /// `\p{Cc}`, `\p{Cf}`, `\p{Co}`: controls, format characters, private use.
    Control = 6,
}

impl Category {
    /// The categories a regex class `\p{..}` stands for in llama.cpp's
    /// collapsed matching, where the letter subclasses all mean "letter".
    pub(crate) fn from_class_name(name: &str) -> Option<Category> {
        Some(match name {
            "N" => Category::Number,
            "L" | "Lu" | "Ll" | "Lt" | "Lm" | "Lo" => Category::Letter,
            "P" => Category::Punctuation,
            "M" => Category::Mark,
            "S" => Category::Symbol,
            _ => return None,
        })
    }
}

struct Table {
    ascii: [Category; 128],
    /// Sorted, disjoint `(first, last, category)` ranges above ASCII.
    ranges: Vec<(u32, u32, Category)>,
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut ranges = Vec::new();
        for (class, cat) in [
            ("N", Category::Number),
            ("L", Category::Letter),
            ("P", Category::Punctuation),
            ("M", Category::Mark),
            ("S", Category::Symbol),
            ("Cc", Category::Control),
            ("Cf", Category::Control),
            ("Co", Category::Control),
        ] {
            for (a, b) in class_ranges(class) {
                ranges.push((a, b, cat));
            }
        }
        ranges.sort_unstable_by_key(|r| r.0);
        let mut ascii = [Category::Other; 128];
        for &(a, b, cat) in &ranges {
            for cp in a..=b.min(127) {
                ascii[cp as usize] = cat;
            }
        }
        Table { ascii, ranges }
    })
}

/// The code point ranges of `\p{name}` in the regex engine's Unicode tables.
fn class_ranges(name: &str) -> Vec<(u32, u32)> {
    let hir = regex_syntax::Parser::new()
        .parse(&format!(r"\p{{{name}}}"))
        // The names above are fixed, valid general categories.
        .expect("valid Unicode class");
    match hir.kind() {
        HirKind::Class(Class::Unicode(c)) => c
            .ranges()
            .iter()
            .map(|r| (u32::from(r.start()), u32::from(r.end())))
            .collect(),
        _ => Vec::new(),
    }
}

/// The category of `c`.
pub(crate) fn category(c: char) -> Category {
    let t = table();
    let cp = u32::from(c);
    if cp < 128 {
        return t.ascii[cp as usize];
    }
    let i = t.ranges.partition_point(|r| r.0 <= cp);
    match i.checked_sub(1).map(|i| t.ranges[i]) {
        Some((_, last, cat)) if cp <= last => cat,
        _ => Category::Other,
    }
}

/// ASCII characters of a category, for spelling a class in a regex.
pub(crate) fn ascii_members(cat: Category) -> impl Iterator<Item = char> {
    let t = table();
    (0u8..128)
        .filter(move |&b| t.ascii[usize::from(b)] == cat)
        .map(char::from)
}

/// Simple (one code point) lowercase mapping, as in `UnicodeData.txt`.
pub(crate) fn to_lower(c: char) -> char {
    let mut lower = c.to_lowercase();
    // Full mappings longer than one character (only U+0130 among uppercase
    // letters) start with the simple mapping.
    lower.next().unwrap_or(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories() {
        assert_eq!(category('a'), Category::Letter);
        assert_eq!(category('Ä'), Category::Letter);
        assert_eq!(category('我'), Category::Letter);
        assert_eq!(category('3'), Category::Number);
        assert_eq!(category('½'), Category::Number);
        assert_eq!(category('!'), Category::Punctuation);
        assert_eq!(category('$'), Category::Symbol);
        assert_eq!(category('🦙'), Category::Symbol);
        assert_eq!(category('\u{301}'), Category::Mark);
        assert_eq!(category(' '), Category::Other);
        assert_eq!(category('\n'), Category::Control);
        assert_eq!(category('\u{200D}'), Category::Control);
        assert_eq!(category('\u{10FFFF}'), Category::Other);
        let punct: String = ascii_members(Category::Punctuation).collect();
        assert_eq!(punct, "!\"#%&'()*,-./:;?@[\\]_{}");
        assert_eq!(to_lower('\u{130}'), 'i');
        assert_eq!(to_lower('Б'), 'б');
    }
}
