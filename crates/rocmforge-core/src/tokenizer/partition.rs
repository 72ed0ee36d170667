//! Cutting input text around special tokens written literally in it, before
//! the text reaches SPM or BPE (llama.cpp's `tokenizer_st_partition`).

use std::ops::Range;

use super::vocab::{Attr, Vocab};

/// A stretch of input: raw text (a byte range) or a special token found in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fragment {
    Text(usize, usize),
    Token(u32),
}

/// Whether token `id` is one that only `parse_special` matches: a control
/// or unknown token (user-defined ones are always matched).
pub(crate) fn is_hidden(vocab: &Vocab, id: u32) -> bool {
    vocab.attr(id).any(Attr::CONTROL.union(Attr::UNKNOWN))
}

/// Cuts `text` around literal occurrences of special tokens, longest token
/// first: each token claims every occurrence in the text not yet claimed.
/// User-defined tokens are always matched; control and unknown tokens only
/// with `parse_special`, so that text typed by a user cannot inject them,
/// and never where an occurrence overlaps one of the byte ranges `plain`
/// (a chat message's content inside its rendered template). Text on both
/// sides of an occurrence left as text stays one fragment, so the result
/// is what the whole text would give with `parse_special` off there.
pub(crate) fn partition(
    text: &str,
    vocab: &Vocab,
    literal: &[u32],
    parse_special: bool,
    plain: &[Range<usize>],
) -> Vec<Fragment> {
    let mut frags = Vec::new();
    if text.is_empty() {
        return frags;
    }
    frags.push(Fragment::Text(0, text.len()));
    let mut next = Vec::new();
    for &id in literal {
        let is_hidden = is_hidden(vocab, id);
        if !parse_special && is_hidden {
            continue;
        }
        let Some(needle) = vocab.text(id) else {
            continue;
        };
        if needle.is_empty() {
            continue;
        }
        let mut changed = false;
        next.clear();
        for &frag in &frags {
            let Fragment::Text(mut start, end) = frag else {
                next.push(frag);
                continue;
            };
            let mut from = start;
            while let Some(found) = text[from..end].find(needle) {
                let at = from + found;
                let span = at..at + needle.len();
                if is_hidden
                    && plain
                        .iter()
                        .any(|p| p.start < span.end && span.start < p.end)
                {
                    // Plain text here: look again one character on.
                    from = at + needle.chars().next().map_or(1, char::len_utf8);
                    continue;
                }
                changed = true;
                if at > start {
                    next.push(Fragment::Text(start, at));
                }
                next.push(Fragment::Token(id));
                start = span.end;
                from = start;
            }
            if start < end {
                next.push(Fragment::Text(start, end));
            }
        }
        if changed {
            std::mem::swap(&mut frags, &mut next);
        }
    }
    frags
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(tokens: &[&str], types: &[i32]) -> Vocab {
        let tokens = tokens.iter().map(|s| s.to_string()).collect();
        Vocab::build(tokens, None, Some(types.to_vec())).unwrap().0
    }

    #[test]
    fn partition_respects_parse_special_and_length_order() {
        let v = vocab(&["x", "<s>", "<tool>", "<tool>x"], &[1, 3, 4, 4]);
        let literal = [3, 2, 1];
        let text = "a<s>b<tool>x<tool>";
        let plain = partition(text, &v, &literal, false, &[]);
        assert_eq!(
            plain,
            [Fragment::Text(0, 5), Fragment::Token(3), Fragment::Token(2)]
        );
        let special = partition(text, &v, &literal, true, &[]);
        assert_eq!(
            special,
            [
                Fragment::Text(0, 1),
                Fragment::Token(1),
                Fragment::Text(4, 5),
                Fragment::Token(3),
                Fragment::Token(2)
            ]
        );
        assert!(partition("", &v, &literal, true, &[]).is_empty());
    }

    #[test]
    fn plain_ranges_keep_control_tokens_as_text() {
        let v = vocab(&["x", "<s>", "<tool>"], &[1, 3, 4]);
        let literal = [2, 1];
        let text = "a<s>b<s>c<tool>";
        // The second <s> (bytes 5..8) lies in a plain range, as does the
        // user-defined <tool>, which is matched anyway.
        let plain = [Range { start: 4, end: 15 }];
        let frags = partition(text, &v, &literal, true, &plain);
        assert_eq!(
            frags,
            [
                Fragment::Text(0, 1),
                Fragment::Token(1),
                Fragment::Text(4, 9),
                Fragment::Token(2)
            ]
        );
        // Overlapping the range's edge is enough to stay text.
        let edge = [Range { start: 2, end: 3 }];
        let frags = partition(text, &v, &literal, true, &edge);
        assert_eq!(
            frags,
            [
                Fragment::Text(0, 5),
                Fragment::Token(1),
                Fragment::Text(8, 9),
                Fragment::Token(2)
            ]
        );
    }
}
