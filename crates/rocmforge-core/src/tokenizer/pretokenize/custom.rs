//! The two splitters llama.cpp writes by hand instead of as regexes; their
//! results, quirks included, are what the models' files were converted against.

use crate::tokenizer::unicode::{self, Category};

/// Han ideographs as llama.cpp's `unicode_cpt_is_han` counts them.
fn is_han(c: char) -> bool {
    matches!(u32::from(c),
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F
        | 0x2B820..=0x2CEAF
        | 0x2CEB0..=0x2EBEF
        | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

/// Cuts `piece` (whose first byte is at `base` in the text) and appends the
/// byte ranges of the parts to `out`, given the end of each part in chars.
struct Cutter<'a> {
    offsets: Vec<usize>,
    prev: usize,
    base: usize,
    out: &'a mut Vec<(usize, usize)>,
}

impl Cutter<'_> {
    fn cut(&mut self, end: usize) {
        if end > self.prev {
            self.out.push((
                self.base + self.offsets[self.prev],
                self.base + self.offsets[end],
            ));
        }
        self.prev = end;
    }
}

fn char_offsets(piece: &str) -> (Vec<char>, Vec<usize>) {
    let chars: Vec<char> = piece.chars().collect();
    let mut offsets: Vec<usize> = piece.char_indices().map(|(i, _)| i).collect();
    offsets.push(piece.len());
    (chars, offsets)
}

/// Digit runs as a leading `len % 3` digits, then groups of three. As in
/// llama.cpp, text before a run joins the run's first part (later patterns
/// separate them again).
pub(super) fn digit_groups(piece: &str, base: usize, out: &mut Vec<(usize, usize)>) {
    let (chars, offsets) = char_offsets(piece);
    let mut cut = Cutter {
        offsets,
        prev: 0,
        base,
        out,
    };
    let is_num = |i: usize| {
        chars
            .get(i)
            .is_some_and(|&c| unicode::category(c) == Category::Number)
    };
    let mut pos = 0;
    while pos < chars.len() {
        if !is_num(pos) {
            pos += 1;
            continue;
        }
        let start = pos;
        while is_num(pos) {
            pos += 1;
        }
        let lead = (pos - start) % 3;
        if lead > 0 {
            cut.cut(start + lead);
        }
        let mut at = start + lead;
        while at < pos {
            at += 3;
            cut.cut(at);
        }
    }
    cut.cut(chars.len());
}

/// Kimi K2: `[\p{Han}]+`, letter words without Han plus an optional
/// contraction, `\p{N}{1,3}`, ` ?[^\s\p{L}\p{N}]+[\r\n]*`, `\s*[\r\n]+`,
/// `\s+(?!\S)`, `\s+`, tried in that order at each position.
pub(super) fn kimi_k2(piece: &str, base: usize, out: &mut Vec<(usize, usize)>) {
    let (chars, offsets) = char_offsets(piece);
    let n = chars.len();
    let mut cut = Cutter {
        offsets,
        prev: 0,
        base,
        out,
    };
    let at = |i: usize| chars.get(i).copied();
    let cat = |i: usize| at(i).map(unicode::category);
    let is_letter = |i: usize| cat(i) == Some(Category::Letter);
    let is_word_letter = |i: usize| is_letter(i) && !at(i).is_some_and(is_han);
    let is_ws = |i: usize| at(i).is_some_and(char::is_whitespace);
    let is_newline = |i: usize| matches!(at(i), Some('\r' | '\n'));
    // A character that may lead a letter word: not \r, \n, letter or number.
    let may_lead = |i: usize| {
        at(i).is_some() && !is_newline(i) && !is_letter(i) && cat(i) != Some(Category::Number)
    };
    let lower = |i: usize| at(i).map(unicode::to_lower);

    let mut pos = 0;
    while pos < n {
        if at(pos).is_some_and(is_han) {
            while at(pos).is_some_and(is_han) {
                pos += 1;
            }
            cut.cut(pos);
            continue;
        }
        if is_word_letter(pos) || (may_lead(pos) && is_word_letter(pos + 1)) {
            if may_lead(pos) {
                pos += 1;
            }
            while is_word_letter(pos) {
                pos += 1;
            }
            if at(pos) == Some('\'') && pos + 1 < n {
                match (lower(pos + 1), lower(pos + 2).filter(|_| pos + 2 < n)) {
                    (Some('s' | 't' | 'm' | 'd'), _) => pos += 2,
                    (Some('r'), Some('e')) | (Some('v'), Some('e')) | (Some('l'), Some('l')) => {
                        pos += 3
                    }
                    _ => {}
                }
            }
            cut.cut(pos);
            continue;
        }
        if cat(pos) == Some(Category::Number) {
            let mut start = pos;
            while cat(pos) == Some(Category::Number) {
                pos += 1;
                if pos - start >= 3 {
                    cut.cut(pos);
                    start = pos;
                }
            }
            cut.cut(pos);
            continue;
        }
        let sym_at = if at(pos) == Some(' ') { pos + 1 } else { pos };
        let is_sym = |i: usize| {
            at(i).is_some() && !is_ws(i) && !is_letter(i) && cat(i) != Some(Category::Number)
        };
        if is_sym(sym_at) {
            pos = sym_at;
            while is_sym(pos) {
                pos += 1;
            }
            while is_newline(pos) {
                pos += 1;
            }
            cut.cut(pos);
            continue;
        }
        let mut n_ws = 0;
        let mut after_newline = None;
        while is_ws(pos + n_ws) {
            if is_newline(pos + n_ws) {
                after_newline = Some(pos + n_ws + 1);
            }
            n_ws += 1;
        }
        if let Some(end) = after_newline {
            pos = end;
        } else if n_ws > 1 && pos + n_ws < n {
            pos += n_ws - 1;
        } else if n_ws > 0 {
            pos += n_ws;
        } else {
            pos += 1;
        }
        cut.cut(pos);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(f: fn(&str, usize, &mut Vec<(usize, usize)>), text: &str) -> Vec<&str> {
        let mut out = Vec::new();
        f(text, 0, &mut out);
        out.iter().map(|&(a, b)| &text[a..b]).collect()
    }

    #[test]
    fn digit_groups_from_the_right() {
        assert_eq!(run(digit_groups, "1234567"), ["1", "234", "567"]);
        assert_eq!(run(digit_groups, "ab12345 x"), ["ab12", "345", " x"]);
        assert_eq!(run(digit_groups, "abc"), ["abc"]);
    }

    #[test]
    fn kimi_k2_words() {
        assert_eq!(
            run(kimi_k2, "我想Hello world's 12345!!\n\n  x"),
            ["我想", "Hello", " world's", " ", "123", "45", "!!\n\n", " ", " x"]
        );
    }
}
