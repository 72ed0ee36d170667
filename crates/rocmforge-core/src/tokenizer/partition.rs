//! Cutting input text around special tokens written literally in it, before
//! the text reaches SPM or BPE (llama.cpp's `tokenizer_st_partition`).

use super::vocab::{Attr, Vocab};

/// A stretch of input: raw text (a byte range) or a special token found in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fragment {
    Text(usize, usize),
    Token(u32),
}

/// Cuts `text` around literal occurrences of special tokens, longest token
/// first: each token claims every occurrence in the text not yet claimed.
/// User-defined tokens are always matched; control and unknown tokens only
/// with `parse_special`, so that text typed by a user cannot inject them.
pub(crate) fn partition(
    text: &str,
    vocab: &Vocab,
    literal: &[u32],
    parse_special: bool,
) -> Vec<Fragment> {
    let mut frags = Vec::new();
    if text.is_empty() {
        return frags;
    }
    frags.push(Fragment::Text(0, text.len()));
    let hidden = Attr::CONTROL.union(Attr::UNKNOWN);
    let mut next = Vec::new();
    for &id in literal {
        if !parse_special && vocab.attr(id).any(hidden) {
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
            while let Some(pos) = text[start..end].find(needle) {
                changed = true;
                if pos > 0 {
                    next.push(Fragment::Text(start, start + pos));
                }
                next.push(Fragment::Token(id));
                start += pos + needle.len();
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
        let plain = partition(text, &v, &literal, false);
        assert_eq!(
            plain,
            [Fragment::Text(0, 5), Fragment::Token(3), Fragment::Token(2)]
        );
        let special = partition(text, &v, &literal, true);
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
        assert!(partition("", &v, &literal, true).is_empty());
    }
}
