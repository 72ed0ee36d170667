//! User stop strings: generation ends where one appears, and it is not part
//! of the reply.
//!
//! Text arrives a token at a time, and a stop string can span tokens
//! (`"\nUser:"` as `"\n"`, `"User"`, `":"`). So text that could still turn
//! out to be the start of a stop string is held back until the next piece
//! decides: printed if the stop string does not follow, dropped if it does.
//! What is printed is therefore always a prefix of the final reply.

/// Finds stop strings in streamed text.
#[derive(Debug, Clone, Default)]
pub struct StopStrings {
    stops: Vec<String>,
    /// Received but not yet released: a possible start of a stop string.
    held: String,
    stopped: bool,
}

/// What one piece of text yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopStep {
    /// Text that can be shown now.
    pub text: String,
    /// A stop string was found: generation should end, and `text` is the
    /// reply's last part (everything before the stop string).
    pub stopped: bool,
}

impl StopStrings {
    /// Empty strings are ignored: they would stop before the first token.
    pub fn new<S: Into<String>>(stops: impl IntoIterator<Item = S>) -> StopStrings {
        StopStrings {
            stops: stops
                .into_iter()
                .map(Into::into)
                .filter(|s: &String| !s.is_empty())
                .collect(),
            held: String::new(),
            stopped: false,
        }
    }

    /// Takes the next piece of generated text. After a stop, further
    /// pieces yield nothing.
    pub fn push(&mut self, piece: &str) -> StopStep {
        if self.stopped {
            return StopStep {
                text: String::new(),
                stopped: true,
            };
        }
        self.held.push_str(piece);
        // The earliest stop string wins; text before it is the reply's end.
        let first = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        if let Some(at) = first {
            self.held.truncate(at);
            self.stopped = true;
            return StopStep {
                text: std::mem::take(&mut self.held),
                stopped: true,
            };
        }
        let keep = self.possible_start();
        let text = self.held[..self.held.len() - keep].to_owned();
        self.held.drain(..self.held.len() - keep);
        StopStep {
            text,
            stopped: false,
        }
    }

    /// Releases what is held back: generation ended without a stop string
    /// (end-of-generation token, token limit, Ctrl-C).
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Clears the state for a new reply, keeping the stop strings.
    pub fn reset(&mut self) {
        self.held.clear();
        self.stopped = false;
    }

    /// Length in bytes of the longest end of `held` that is a proper
    /// prefix of some stop string.
    fn possible_start(&self) -> usize {
        let held = self.held.as_str();
        self.stops
            .iter()
            .map(|stop| {
                let longest = held.len().min(stop.len() - 1);
                (1..=longest)
                    .rev()
                    .find(|&n| {
                        held.is_char_boundary(held.len() - n)
                            && stop.starts_with(&held[held.len() - n..])
                    })
                    .unwrap_or(0)
            })
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `pieces`, returning what was shown and whether it stopped.
    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let mut s = StopStrings::new(stops.iter().copied());
        let mut shown = String::new();
        for p in pieces {
            let step = s.push(p);
            shown.push_str(&step.text);
            if step.stopped {
                return (shown, true);
            }
        }
        shown.push_str(&s.finish());
        (shown, false)
    }

    #[test]
    fn a_stop_string_in_one_piece_is_cut() {
        assert_eq!(run(&["END"], &["abc", "xENDy"]), ("abcx".into(), true));
    }

    #[test]
    fn a_stop_string_across_pieces_is_never_shown() {
        let mut s = StopStrings::new(["\nUser:"]);
        assert_eq!(s.push("Sure.").text, "Sure.");
        // Could start the stop string: held back.
        assert_eq!(s.push("\n").text, "");
        assert_eq!(s.push("Us").text, "");
        let last = s.push("er: hi");
        assert_eq!(
            last,
            StopStep {
                text: String::new(),
                stopped: true
            }
        );
    }

    #[test]
    fn held_text_is_released_when_the_stop_string_does_not_follow() {
        let mut s = StopStrings::new(["\nUser:"]);
        assert_eq!(s.push("a\nUs").text, "a");
        assert_eq!(s.push("ually").text, "\nUsually");
        assert_eq!(run(&["\nUser:"], &["a", "\nUs"]), ("a\nUs".into(), false));
    }

    #[test]
    fn the_earliest_of_several_stops_wins() {
        assert_eq!(run(&["bb", "a"], &["xbbya"]), ("x".into(), true));
        assert_eq!(run(&["yz", "xy"], &["wx", "yz"]), ("w".into(), true));
    }

    #[test]
    fn multibyte_text_is_held_on_character_boundaries() {
        // "é" and "ê" share their first byte; only whole characters are held.
        assert_eq!(run(&["ê!"], &["café", "ê", "!"]), ("café".into(), true));
        assert_eq!(run(&["ê!"], &["café", "ê", "?"]), ("caféê?".into(), false));
    }

    #[test]
    fn no_stops_passes_everything_through() {
        let mut s = StopStrings::new(Vec::<String>::new());
        assert_eq!(s.push("a").text, "a");
        let mut s = StopStrings::new([""]);
        assert_eq!(s.push("a").text, "a");
    }

    #[test]
    fn nothing_follows_a_stop_until_reset() {
        let mut s = StopStrings::new(["x"]);
        assert!(s.push("x").stopped);
        assert!(s.push("abc").text.is_empty());
        s.reset();
        assert_eq!(s.push("ab").text, "ab");
    }
}
