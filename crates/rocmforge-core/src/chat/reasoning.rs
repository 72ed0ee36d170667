//! A reply's reasoning kept apart from what it says, read as the reply
//! streams: gpt-oss's harmony channels, and the `<think>...</think>` block
//! Qwen3 and DeepSeek-R1 open their replies with.
//!
//! A harmony reply is a run of messages, each a header and a body:
//! `<|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>
//! final<|message|>...` (the first message's `<|start|>assistant` is the
//! generation prompt's; the reply's end token is not in its text). The
//! `analysis` channel is reasoning (OpenAI's `reasoning_content`, as
//! llama-server returns it); `final`, and `commentary` with no recipient
//! (a preamble), are what the model says; a message to a recipient (a
//! function call, [`super::tools`]) is neither, and headers are markup.
//! A think reply is `<think>reasoning</think>content`, each part trimmed of
//! the whitespace around it, as llama-server gives them; a reply that does
//! not open with `<think>` is all content, unless the prompt opened the
//! block (its generation prompt ends with `<think>`: DeepSeek-R1, Qwen3's
//! thinking-only models), where the reply starts inside it.
//!
//! [`ReasoningReader`] takes the text as it streams and releases each piece
//! as reasoning or content once no marker can still be forming in it, so a
//! client never sees half a marker. What it releases does not depend on
//! how the text was cut into pieces; the whole reply's split
//! ([`ReasoningFormat::split`]) is the reader fed the text at once, so a
//! streamed reply and a whole one agree. Harmony text that is no harmony
//! (no `<|message|>` within [`MAX_HEADER`] bytes of a header's start) is
//! content, as it is.

/// How a chat template's replies carry their reasoning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasoningFormat {
    /// gpt-oss's channels.
    Harmony,
    /// A `<think>` block first (Qwen3, DeepSeek-R1).
    Think,
}

impl ReasoningFormat {
    /// The format of a template's replies: harmony where it renders an
    /// assistant turn on the analysis channel (gpt-oss's), think where it
    /// writes `<think>`; `None` for the rest.
    pub fn of_template(source: &str) -> Option<ReasoningFormat> {
        if source.contains("<|channel|>analysis<|message|>") {
            Some(ReasoningFormat::Harmony)
        } else if source.contains("<think>") {
            Some(ReasoningFormat::Think)
        } else {
            None
        }
    }

    /// Whether the rendered `prompt` itself opens the reasoning: a think
    /// template whose generation prompt ends with `<think>` (DeepSeek-R1,
    /// Qwen3's thinking-only models), so the reply starts inside the block
    /// and only closes it.
    pub fn prompt_opens(self, prompt: &str) -> bool {
        self == ReasoningFormat::Think && prompt.trim_end().ends_with(THINK_OPEN)
    }

    /// A reader of a reply in this format, after a prompt that opened the
    /// reasoning or not ([`Self::prompt_opens`]).
    pub fn reader(self, opened: bool) -> ReasoningReader {
        match self {
            ReasoningFormat::Harmony => ReasoningReader::Harmony(HarmonyReader::new()),
            ReasoningFormat::Think if opened => ReasoningReader::Think(ThinkReader::opened()),
            ReasoningFormat::Think => ReasoningReader::Think(ThinkReader::default()),
        }
    }

    /// A whole reply's (reasoning, content), as the reader splits it
    /// streamed; reasoning `None` when there was none.
    pub fn split(self, text: &str, opened: bool) -> (Option<String>, String) {
        let mut r = self.reader(opened);
        let mut parts = r.push(text);
        parts.extend(r.finish());
        let (reasoning, content) = joined(parts);
        ((!reasoning.is_empty()).then_some(reasoning), content)
    }
}

/// Parts joined into (reasoning, content).
pub fn joined(parts: impl IntoIterator<Item = Part>) -> (String, String) {
    let (mut reasoning, mut content) = (String::new(), String::new());
    for p in parts {
        match p {
            Part::Reasoning(t) => reasoning.push_str(&t),
            Part::Content(t) => content.push_str(&t),
        }
    }
    (reasoning, content)
}

/// A streamed reply's split, in its template's format.
#[derive(Debug, Clone)]
pub enum ReasoningReader {
    Harmony(HarmonyReader),
    Think(ThinkReader),
}

impl ReasoningReader {
    /// The parts `text` (the reply's next piece) releases.
    pub fn push(&mut self, text: &str) -> Vec<Part> {
        match self {
            ReasoningReader::Harmony(r) => r.push(text),
            ReasoningReader::Think(r) => r.push(text),
        }
    }

    /// What is left when the reply ends.
    pub fn finish(&mut self) -> Vec<Part> {
        match self {
            ReasoningReader::Harmony(r) => r.finish(),
            ReasoningReader::Think(r) => r.finish(),
        }
    }
}

/// Bytes a header may take before the text is taken as no harmony.
pub const MAX_HEADER: usize = 256;

const START: &str = "<|start|>";
const MESSAGE: &str = "<|message|>";
const CHANNEL: &str = "<|channel|>";
/// What ends a body: the message's end, or an end of generation that was
/// rendered into the text.
const BODY_ENDS: [&str; 3] = ["<|end|>", "<|return|>", "<|call|>"];

/// What a piece of a reply is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Reasoning(String),
    Content(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    Reasoning,
    Content,
    /// To a recipient (a call), or after an end of generation.
    Hidden,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading a header, up to its `<|message|>`.
    Header,
    /// Reading a body, up to its end.
    Body(Body),
    /// No harmony: everything is content.
    Raw,
}

/// The harmony split of a streamed reply; see the module doc.
#[derive(Debug, Clone)]
pub struct HarmonyReader {
    state: State,
    /// Text not yet released: a header being read, or the tail of a body
    /// that may be the start of a marker.
    pending: String,
    /// Whether a message's header has been read: a header left unfinished
    /// after one is markup, before any it is text.
    seen: bool,
}

impl Default for HarmonyReader {
    fn default() -> Self {
        HarmonyReader::new()
    }
}

impl HarmonyReader {
    pub fn new() -> HarmonyReader {
        HarmonyReader {
            state: State::Header,
            pending: String::new(),
            seen: false,
        }
    }

    /// The parts `text` (the reply's next piece) releases.
    pub fn push(&mut self, text: &str) -> Vec<Part> {
        self.pending.push_str(text);
        let mut out = Vec::new();
        loop {
            match self.state {
                State::Raw => {
                    emit(&mut out, Body::Content, std::mem::take(&mut self.pending));
                    return out;
                }
                // A header is at most MAX_HEADER bytes, whatever the pieces.
                State::Header => match self.pending.find(MESSAGE).filter(|&at| at <= MAX_HEADER) {
                    Some(at) => {
                        let body = body_of(&self.pending[..at]);
                        self.pending.drain(..at + MESSAGE.len());
                        self.state = State::Body(body);
                        self.seen = true;
                    }
                    None if self.pending.len() >= MAX_HEADER + MESSAGE.len() => {
                        self.state = State::Raw
                    }
                    None => return out,
                },
                State::Body(body) => {
                    let end = BODY_ENDS
                        .iter()
                        .filter_map(|m| self.pending.find(m).map(|at| (at, *m)))
                        .min();
                    match end {
                        Some((at, marker)) => {
                            let rest = self.pending.split_off(at);
                            emit(&mut out, body, std::mem::take(&mut self.pending));
                            self.pending = rest[marker.len()..].to_string();
                            if marker == BODY_ENDS[0] {
                                self.state = State::Header;
                                // The next header starts at its <|start|>.
                                if let Some(s) = self.pending.strip_prefix(START) {
                                    self.pending = s.to_string();
                                }
                            } else {
                                self.state = State::Body(Body::Hidden);
                            }
                        }
                        None => {
                            // Keep back a tail that may begin a marker.
                            let keep = partial_len(&self.pending, &BODY_ENDS);
                            let rest = self.pending.split_off(self.pending.len() - keep);
                            emit(&mut out, body, std::mem::replace(&mut self.pending, rest));
                            return out;
                        }
                    }
                }
            }
        }
    }

    /// What is left when the reply ends: a body's kept-back tail; a header
    /// that never reached its `<|message|>` is markup after a message, and
    /// before any the text is no harmony, so content.
    pub fn finish(&mut self) -> Vec<Part> {
        let mut out = Vec::new();
        let rest = std::mem::take(&mut self.pending);
        match self.state {
            State::Body(body) => emit(&mut out, body, rest),
            State::Header if self.seen => {}
            State::Header | State::Raw => emit(&mut out, Body::Content, rest),
        }
        out
    }
}

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum ThinkState {
    /// Before the reply's first text: whether it opens with `<think>`.
    #[default]
    Opening,
    /// Inside the block, up to `</think>`.
    Thinking,
    /// The whitespace after `</think>`, then content.
    Closed,
    Content,
}

/// The `<think>` split of a streamed reply; see the module doc.
#[derive(Debug, Clone, Default)]
pub struct ThinkReader {
    state: ThinkState,
    /// Text not yet released: the opening, whitespace that may end the
    /// block, or a tail that may begin `</think>`.
    pending: String,
    /// Whether reasoning has been released (leading whitespace is not).
    thought: bool,
}

impl ThinkReader {
    /// A reader for a reply that starts inside the block (the prompt
    /// opened it).
    pub fn opened() -> ThinkReader {
        ThinkReader {
            state: ThinkState::Thinking,
            ..ThinkReader::default()
        }
    }

    /// The parts `text` (the reply's next piece) releases.
    pub fn push(&mut self, text: &str) -> Vec<Part> {
        self.pending.push_str(text);
        let mut out = Vec::new();
        loop {
            match self.state {
                ThinkState::Opening => {
                    let t = self.pending.trim_start();
                    if let Some(rest) = t.strip_prefix(THINK_OPEN) {
                        self.pending = rest.to_string();
                        self.state = ThinkState::Thinking;
                    } else if THINK_OPEN.starts_with(t) {
                        return out;
                    } else {
                        self.state = ThinkState::Content;
                    }
                }
                ThinkState::Thinking => {
                    if !self.thought {
                        let t = self.pending.trim_start().to_string();
                        self.pending = t;
                    }
                    if let Some(at) = self.pending.find(THINK_CLOSE) {
                        let rest = self.pending[at + THINK_CLOSE.len()..].to_string();
                        let said = self.pending[..at].trim_end().to_string();
                        emit(&mut out, Body::Reasoning, said);
                        self.pending = rest;
                        self.state = ThinkState::Closed;
                        continue;
                    }
                    // Keep back trailing whitespace (it may end the block)
                    // and a tail that may begin `</think>`.
                    let keep_from = match partial_len(&self.pending, &[THINK_CLOSE]) {
                        0 => self.pending.trim_end().len(),
                        n => self.pending[..self.pending.len() - n].trim_end().len(),
                    };
                    let rest = self.pending.split_off(keep_from);
                    let said = std::mem::replace(&mut self.pending, rest);
                    self.thought |= !said.is_empty();
                    emit(&mut out, Body::Reasoning, said);
                    return out;
                }
                ThinkState::Closed => {
                    let t = self.pending.trim_start().to_string();
                    self.pending = t;
                    if self.pending.is_empty() {
                        return out;
                    }
                    self.state = ThinkState::Content;
                }
                ThinkState::Content => {
                    emit(&mut out, Body::Content, std::mem::take(&mut self.pending));
                    return out;
                }
            }
        }
    }

    /// What is left when the reply ends: an opening that never became
    /// `<think>` is content; a block that never closed is reasoning.
    pub fn finish(&mut self) -> Vec<Part> {
        let mut out = Vec::new();
        let rest = std::mem::take(&mut self.pending);
        match self.state {
            ThinkState::Opening | ThinkState::Content => emit(&mut out, Body::Content, rest),
            ThinkState::Thinking => emit(&mut out, Body::Reasoning, rest.trim_end().to_string()),
            ThinkState::Closed => {}
        }
        out
    }
}

fn emit(out: &mut Vec<Part>, body: Body, text: String) {
    if text.is_empty() {
        return;
    }
    match body {
        Body::Reasoning => out.push(Part::Reasoning(text)),
        Body::Content => out.push(Part::Content(text)),
        Body::Hidden => {}
    }
}

/// What a header (the text before `<|message|>`) makes its body.
fn body_of(header: &str) -> Body {
    match harmony_header(header) {
        (_, Some(_)) => Body::Hidden,
        (Some("analysis"), None) => Body::Reasoning,
        _ => Body::Content,
    }
}

/// A harmony header's channel and recipient (`to=`), each the word after
/// its marker.
pub(crate) fn harmony_header(header: &str) -> (Option<&str>, Option<&str>) {
    fn word(s: &str) -> &str {
        s.split([' ', '<']).next().unwrap_or("")
    }
    (
        header.split_once(CHANNEL).map(|(_, c)| word(c)),
        header.split_once("to=").map(|(_, r)| word(r)),
    )
}

/// A whole harmony reply's messages, as (header, body): a body ends at
/// its message's end or a rendered end of generation.
pub(crate) fn harmony_messages(text: &str) -> impl Iterator<Item = (&str, &str)> {
    text.split(START).filter_map(|message| {
        let (header, body) = message.split_once(MESSAGE)?;
        let end = BODY_ENDS
            .iter()
            .filter_map(|e| body.find(e))
            .min()
            .unwrap_or(body.len());
        Some((header, &body[..end]))
    })
}

/// The length of the longest tail of `text` that is a proper prefix of one
/// of `markers`.
fn partial_len(text: &str, markers: &[&str]) -> usize {
    markers
        .iter()
        .flat_map(|m| (1..m.len()).rev().map(move |n| &m[..n]))
        .filter(|p| text.ends_with(p))
        .map(|p| p.len())
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPLY: &str = "<|channel|>analysis<|message|>The user wants 2+2.<|end|><|start|>assistant<|channel|>final<|message|>It is 4.";

    #[test]
    fn channels_split_into_reasoning_and_content() {
        assert_eq!(
            ReasoningFormat::Harmony.split(REPLY, false),
            (Some("The user wants 2+2.".into()), "It is 4.".into())
        );
        // A call's arguments are neither; a preamble is content.
        let call = "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}";
        assert_eq!(
            ReasoningFormat::Harmony.split(call, false),
            (None, "Checking.".into())
        );
        // A header cut off after a message is markup.
        assert_eq!(
            ReasoningFormat::Harmony.split(
                "<|channel|>final<|message|>Hi<|end|><|start|>assistant",
                false
            ),
            (None, "Hi".into())
        );
        // An end of generation rendered into the text ends what is said.
        assert_eq!(
            ReasoningFormat::Harmony.split("<|channel|>final<|message|>Hi<|return|>junk", false),
            (None, "Hi".into())
        );
    }

    #[test]
    fn formats_are_read_off_templates() {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testdata/chat-templates/"
        );
        let read = |f: &str| std::fs::read_to_string(format!("{dir}{f}")).unwrap();
        let of = |f: &str| ReasoningFormat::of_template(&read(f));
        assert_eq!(of("gpt-oss.jinja"), Some(ReasoningFormat::Harmony));
        assert_eq!(of("qwen3.jinja"), Some(ReasoningFormat::Think));
        assert_eq!(of("llama3.1.jinja"), None);
    }

    #[test]
    fn text_that_is_no_harmony_is_content() {
        assert_eq!(
            ReasoningFormat::Harmony.split("Hello there", false),
            (None, "Hello there".into())
        );
        let long = "x".repeat(MAX_HEADER + MESSAGE.len());
        assert_eq!(
            ReasoningFormat::Harmony.split(&long, false),
            (None, long.clone())
        );
        let mut r = HarmonyReader::new();
        assert_eq!(
            r.push(&long),
            [Part::Content(long.clone())],
            "released once it cannot be a header"
        );
    }

    #[test]
    fn think_blocks_split_into_reasoning_and_content() {
        let think = ReasoningFormat::Think;
        assert_eq!(
            think.split(THINK_REPLY, false),
            (Some("Two and two.\nFour.".into()), "It is 4.\n".into())
        );
        assert_eq!(
            think.split("Hello <think>x</think>", false),
            (None, "Hello <think>x</think>".into())
        );
        assert_eq!(
            think.split("<thi", false),
            (None, "<thi".into()),
            "an opening cut short"
        );
        assert_eq!(
            think.split("<think> cut off ", false),
            (Some("cut off".into()), String::new())
        );
        assert_eq!(think.split("<think></think>Hi", false), (None, "Hi".into()));
    }

    /// A reply after a prompt that opened the block.
    const OPENED_REPLY: &str = "\nTwo and two.\n</think>\n\nIt is 4.";

    #[test]
    fn a_prompt_can_open_the_block() {
        let think = ReasoningFormat::Think;
        assert!(think.prompt_opens("<|im_start|>assistant\n<think>\n"));
        assert!(!think.prompt_opens("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
        assert!(!ReasoningFormat::Harmony.prompt_opens("<think>"));
        assert_eq!(
            think.split(OPENED_REPLY, true),
            (Some("Two and two.".into()), "It is 4.".into())
        );
        // Never closed: all reasoning.
        assert_eq!(
            think.split("thinking on", true),
            (Some("thinking on".into()), String::new())
        );
    }

    const THINK_REPLY: &str = " <think>\n Two and two.\nFour.  \n</think>\n\nIt is 4.\n";

    #[test]
    fn streamed_pieces_release_the_same_split_and_no_half_marker() {
        for (format, reply, opened) in [
            (ReasoningFormat::Harmony, REPLY, false),
            (ReasoningFormat::Think, THINK_REPLY, false),
            (ReasoningFormat::Think, OPENED_REPLY, true),
        ] {
            let whole = format.split(reply, opened);
            for cut in 1..reply.len() {
                let mut r = format.reader(opened);
                let mut parts = Vec::new();
                let mut at = 0;
                while at < reply.len() {
                    let mut end = (at + cut).min(reply.len());
                    while !reply.is_char_boundary(end) {
                        end += 1;
                    }
                    parts.extend(r.push(&reply[at..end]));
                    at = end;
                }
                parts.extend(r.finish());
                let (mut reasoning, mut content) = (String::new(), String::new());
                for p in &parts {
                    let t = match p {
                        Part::Reasoning(t) => {
                            reasoning.push_str(t);
                            t
                        }
                        Part::Content(t) => {
                            content.push_str(t);
                            t
                        }
                    };
                    assert!(
                        !t.contains("<|") && !t.contains("think>"),
                        "{format:?}, pieces of {cut}: a marker in {t:?}"
                    );
                }
                assert_eq!(
                    (Some(reasoning), content),
                    whole,
                    "{format:?}, pieces of {cut}"
                );
            }
        }
    }
}
