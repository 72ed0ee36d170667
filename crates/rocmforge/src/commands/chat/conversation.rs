//! One conversation: its history, the KV cache and the text it holds, and
//! the loop that reads a message and streams the reply.

use std::io::BufRead;
use std::time::Instant;

use rocmforge_core::chat::reasoning::{Part, ReasoningFormat, ReasoningReader};
use rocmforge_core::chat::{
    plain_ranges, CachedText, ChatTemplate, Feed, Message, RenderOptions, StopStrings,
    TemplateError,
};
use rocmforge_core::grammar::Grammars;
use rocmforge_core::sampler::Sampler;
use rocmforge_core::session::Session;
use rocmforge_core::tokenizer::{StreamDecoder, Tokenizer};

use super::interrupt;
use crate::commands::{note, write_stdout, CliError};

/// How a reply ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReplyEnd {
    /// The model ended its turn, or a stop string appeared.
    Done,
    TokenLimit,
    ContextFull,
    Interrupted,
}

/// A conversation with the model: `run` fills it in, [`Chat::clear`] then
/// starts the history.
pub struct Chat {
    pub(super) session: Session,
    pub(super) tok: Tokenizer,
    pub(super) template: ChatTemplate,
    pub(super) render: RenderOptions,
    pub(super) system: Option<String>,
    pub(super) history: Vec<Message>,
    /// The text whose tokens the KV cache holds.
    pub(super) cached: CachedText,
    pub(super) sampler: Sampler,
    pub(super) stops: StopStrings,
    pub(super) n_predict: i64,
    pub(super) timings: bool,
    /// The grammar every reply follows (`--grammar`), compiled per reply.
    pub(super) grammar: Option<(Grammars, String)>,
    /// How replies carry reasoning, split out of what they say.
    pub(super) reasoning: Option<ReasoningFormat>,
}

/// A finished reply.
struct Reply {
    /// The text shown on stdout (a stop string and the reasoning
    /// excluded): the history's assistant turn.
    text: String,
    end: ReplyEnd,
    generated: usize,
    prompt_s: f64,
    gen_s: f64,
}

impl Chat {
    /// Starts the conversation over: only the system prompt remains.
    pub fn clear(&mut self) {
        self.history.clear();
        self.history.extend(
            self.system
                .iter()
                .map(|s| Message::new("system", s.as_str())),
        );
        self.session.reset();
        self.cached.clear();
        self.sampler.reset();
    }

    /// The read-reply loop, until end of input or `/exit`.
    pub fn converse(&mut self) -> Result<(), CliError> {
        let interactive = interrupt::is_interactive();
        interrupt::conversation_started();
        if interactive {
            note("chat: /clear starts over, /exit or Ctrl-D leaves, Ctrl-C stops a reply");
        }
        let mut input = std::io::stdin().lock();
        let mut line = String::new();
        loop {
            if interactive {
                write_stdout(&mut std::io::stdout(), b"> ")?;
            }
            line.clear();
            if input.read_line(&mut line)? == 0 {
                if interactive {
                    write_stdout(&mut std::io::stdout(), b"\n")?;
                }
                return Ok(());
            }
            let text = line.trim_end_matches(['\n', '\r']);
            match text.trim() {
                "" => continue,
                "/exit" | "/quit" => return Ok(()),
                "/clear" => {
                    self.clear();
                    if interactive {
                        note("(conversation cleared)");
                    }
                    continue;
                }
                _ => {}
            }
            self.turn(text)?;
        }
    }

    /// One user message and the streamed reply.
    fn turn(&mut self, user: &str) -> Result<(), CliError> {
        self.history.push(Message::new("user", user));
        let rendered = match self.template.render(&self.history, &self.render) {
            Err(e @ TemplateError::Raised { .. }) if self.system.is_some() => {
                return Err(
                    format!("{e} (if the template has no system role, leave out --system)").into(),
                )
            }
            r => r?,
        };
        // What the user wrote stays text: no turn markers from it.
        let (tok, template, opts) = (&self.tok, &self.template, &self.render);
        let plain = match plain_ranges(tok, template, &self.history, opts, &rendered) {
            Ok(plain) => plain,
            Err(_) => {
                self.history.pop();
                note("this message holds a special token's text, which this chat template cannot keep as plain text; rephrase it");
                return Ok(());
            }
        };
        let tokens = match self.cached.feed_with_plain(&self.tok, &rendered, &plain) {
            Feed::Append(tokens) => tokens,
            Feed::Restart(tokens) => {
                self.session.reset();
                self.sampler.reset();
                tokens
            }
        };
        let n_ctx = self.session.n_ctx();
        if self.session.n_past() + tokens.len() >= n_ctx {
            // Nothing was evaluated: the cache no longer matches its text.
            self.history.pop();
            self.cached.clear();
            self.session.reset();
            note(&format!(
                "the conversation no longer fits the context of {n_ctx} tokens; /clear starts over (or raise --ctx-size)"
            ));
            return Ok(());
        }
        let reused = self.session.n_past();
        // A generation prompt ending with `<think>` starts the reply inside
        // its reasoning.
        let opened = self.reasoning.is_some_and(|f| f.prompt_opens(&rendered));
        interrupt::reply_started();
        let reply = self.reply(&tokens, opened);
        interrupt::reply_ended();
        let reply = match reply {
            Ok(r) => r,
            Err(e) => {
                // The cache may hold part of this turn; start over next time.
                self.cached.clear();
                self.session.reset();
                return Err(e);
            }
        };
        self.history.push(Message::new("assistant", reply.text));
        let mut out = std::io::stdout();
        write_stdout(&mut out, b"\n")?;
        if self.timings {
            note(&format!(
                "prompt: {} new tokens after {reused} cached in {:.2} s; reply: {} tokens in {:.2} s ({:.1} t/s)",
                tokens.len(),
                reply.prompt_s,
                reply.generated,
                reply.gen_s,
                reply.generated as f64 / reply.gen_s.max(1e-9),
            ));
        }
        match reply.end {
            ReplyEnd::Done => {}
            ReplyEnd::TokenLimit => note("(reply cut at the -n token limit)"),
            ReplyEnd::ContextFull => {
                note("(context full: /clear starts over, or raise --ctx-size)")
            }
            ReplyEnd::Interrupted => note("(interrupted)"),
        }
        Ok(())
    }

    /// Evaluates `prompt` and streams the reply to stdout (its reasoning
    /// to stderr; `opened`: the prompt opened it).
    fn reply(&mut self, prompt: &[u32], opened: bool) -> Result<Reply, CliError> {
        let t_prompt = Instant::now();
        let mut logits = self.session.eval(prompt)?.to_vec();
        let prompt_s = t_prompt.elapsed().as_secs_f64();
        let t_gen = Instant::now();
        for &t in prompt {
            self.sampler.accept(t);
        }
        let mut out = Shown {
            stdout: std::io::stdout().lock(),
            reader: self.reasoning.map(|f| f.reader(opened)),
            text: String::new(),
            thinking: false,
        };
        let mut constraint = match &self.grammar {
            Some((grammars, text)) => Some(grammars.gbnf(text).map_err(|e| e.to_string())?),
            None => None,
        };
        let mut decoder = StreamDecoder::new();
        self.stops.reset();
        let mut generated = 0;
        let end = loop {
            if interrupt::reply_interrupted() {
                break ReplyEnd::Interrupted;
            }
            if usize::try_from(self.n_predict).is_ok_and(|n| generated >= n) {
                break ReplyEnd::TokenLimit;
            }
            let id = match constraint.as_mut() {
                None => self.sampler.sample(&logits),
                Some(c) => c
                    .sample(&mut logits, &mut self.sampler)
                    .map_err(|e| e.to_string())?,
            };
            self.sampler.accept(id);
            generated += 1;
            // The end-of-turn token is not evaluated: the next rendering
            // writes the template's own end-of-turn text after the reply.
            if self.tok.is_eog(id) {
                break ReplyEnd::Done;
            }
            let step = self.stops.push(&decoder.push(&self.tok, id));
            out.push(&step.text)?;
            if step.stopped {
                break ReplyEnd::Done;
            }
            if self.session.n_past() >= self.session.n_ctx() {
                break ReplyEnd::ContextFull;
            }
            logits.copy_from_slice(self.session.eval(&[id])?);
            self.cached.push_token(&self.tok, id);
        };
        // Bytes of an unfinished character, and text held back as a
        // possible stop string, belong to the reply unless it stopped.
        let tail = self.stops.push(&decoder.finish());
        let tail = match tail.stopped {
            true => tail.text,
            false => tail.text + &self.stops.finish(),
        };
        out.push(&tail)?;
        Ok(Reply {
            text: out.finish()?,
            end,
            generated,
            prompt_s,
            gen_s: t_gen.elapsed().as_secs_f64(),
        })
    }
}

/// Where a reply's text goes as it streams: with a reasoning format, the
/// reasoning to stderr and the rest to stdout; else all of it to stdout.
struct Shown<'a> {
    stdout: std::io::StdoutLock<'a>,
    reader: Option<ReasoningReader>,
    /// What went to stdout: the reply as the history keeps it.
    text: String,
    /// Whether reasoning was the last thing shown (a newline on stderr
    /// closes it before the answer).
    thinking: bool,
}

impl Shown<'_> {
    fn push(&mut self, text: &str) -> Result<(), CliError> {
        let parts = match self.reader.as_mut() {
            Some(r) => r.push(text),
            None => vec![Part::Content(text.to_string())],
        };
        self.show(parts)
    }

    /// Shows what the reader still held; the text stdout got.
    fn finish(mut self) -> Result<String, CliError> {
        let parts = self
            .reader
            .as_mut()
            .map_or_else(Vec::new, ReasoningReader::finish);
        self.show(parts)?;
        if self.thinking {
            shown_on_stderr("\n");
        }
        Ok(self.text)
    }

    fn show(&mut self, parts: Vec<Part>) -> Result<(), CliError> {
        for p in parts {
            match p {
                Part::Reasoning(t) => {
                    shown_on_stderr(&t);
                    self.thinking = true;
                }
                Part::Content(t) => {
                    if std::mem::take(&mut self.thinking) {
                        shown_on_stderr("\n");
                    }
                    write_stdout(&mut self.stdout, t.as_bytes())?;
                    self.text.push_str(&t);
                }
            }
        }
        Ok(())
    }
}

/// Reasoning text on stderr, flushed as it comes (a closed stderr loses
/// it, as it loses notes).
fn shown_on_stderr(text: &str) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes()).and_then(|_| err.flush());
}
