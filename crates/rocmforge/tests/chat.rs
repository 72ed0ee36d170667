//! `rocmforge chat` end to end on the tiny Qwen3 fixture (random weights,
//! so replies are gibberish: the tests check structure, not words).
//!
//! - Piped stdin: one reply per line, history reused from the KV cache,
//!   `/clear`, stop strings, one-line errors on bad input.
//! - A terminal: driven in tmux (`send-keys`, `capture-pane`): the prompt,
//!   Ctrl-C stopping a reply while the program lives on, `/clear`, `/exit`.
//!   Without tmux that test is skipped, unless `ROCMFORGE_REQUIRE_TMUX=1`
//!   (CI installs tmux and sets it), where it fails.

mod common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{
    assert_one_line_error, command, fixture, run_with_stdin, scratch_dir, stderr, stdout,
};

fn model() -> String {
    fixture("tiny-qwen3-Q8_0.gguf").to_str().unwrap().to_owned()
}

/// `chat` with `input` piped to stdin.
fn chat(args: &[&str], input: &str) -> Output {
    let mut cmd = command("chat");
    cmd.arg("chat")
        .args(["-m", &model(), "--backend", "cpu", "--temp", "0"])
        .args(args);
    run_with_stdin(cmd, input)
}

/// The `--timings` lines: (new tokens, cached tokens, generated tokens).
fn turns(o: &Output) -> Vec<(usize, usize, usize)> {
    stderr(o)
        .lines()
        .filter_map(|l| {
            let l = l.strip_prefix("prompt: ")?;
            let words: Vec<&str> = l.split_whitespace().collect();
            let reply = words.iter().position(|w| *w == "reply:")?;
            Some((
                words[0].parse().ok()?,
                words[4].parse().ok()?,
                words[reply + 1].parse().ok()?,
            ))
        })
        .collect()
}

#[test]
fn piped_lines_get_one_reply_each_and_reuse_the_cache() {
    let o = chat(
        &["--system", "Be brief.", "-n", "6", "--timings"],
        "Hello there\n\nWhat is up?\n/clear\nAgain\n",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    // No prompt and no banner: stdout is the replies, one per message
    // (the empty line is skipped).
    assert!(!stdout(&o).contains("> "), "{}", stdout(&o));
    let t = turns(&o);
    assert_eq!(t.len(), 3, "{}", stderr(&o));
    let (first_new, first_cached, first_gen) = t[0];
    assert_eq!((first_cached, first_gen), (0, 6));
    // The second turn evaluates only its own tokens: the first prompt and
    // the six evaluated reply tokens stay cached.
    assert_eq!(t[1].1, first_new + first_gen, "{}", stderr(&o));
    assert!(t[1].0 < first_new + first_gen, "{t:?}");
    // After /clear the conversation starts over, system prompt included.
    assert_eq!(t[2].1, 0, "{t:?}");
    assert!(
        stderr(&o).contains("(reply cut at the -n token limit)"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_template_that_rewrites_history_is_evaluated_again() {
    // ChatML that leaves the assistant's turns out: the second rendering
    // does not start with the text the cache holds (the first prompt and
    // reply), so the whole conversation is evaluated from position 0.
    let template = scratch_dir("chat-rewrite").join("no-replies.jinja");
    std::fs::write(
        &template,
        "{% for m in messages %}{% if m.role != 'assistant' %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}<|im_start|>assistant\n",
    )
    .unwrap();
    let o = chat(
        &[
            "-n",
            "4",
            "--timings",
            "--chat-template-file",
            template.to_str().unwrap(),
        ],
        "Hello there\nWhat is up?\n",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().count(), 2, "{}", stdout(&o));
    let t = turns(&o);
    assert_eq!(t.len(), 2, "{}", stderr(&o));
    assert_eq!(t[1].1, 0, "{t:?}");
    assert!(t[1].0 > t[0].0, "both user turns are evaluated: {t:?}");
}

#[test]
fn a_stop_string_ends_the_reply_and_is_not_printed() {
    let free = chat(&["-n", "24"], "Tell me a story\n");
    assert!(free.status.success(), "{}", stderr(&free));
    let reply = stdout(&free);
    let reply = reply.trim_end_matches('\n');
    // Stop at a piece of the greedy reply's second half.
    let chars: Vec<char> = reply.chars().collect();
    assert!(chars.len() > 8, "reply too short to cut: {reply:?}");
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 3].iter().collect();
    let cut = &reply[..reply.find(&stop).unwrap()];
    let o = chat(&["-n", "24", "--stop", &stop], "Tell me a story\n");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), format!("{cut}\n"), "stop {stop:?}");
    assert!(!stderr(&o).contains("token limit"), "{}", stderr(&o));
}

#[test]
fn bad_input_is_one_line() {
    let o = chat(&["--stop", "x"], "");
    assert!(
        o.status.success(),
        "empty input ends at once: {}",
        stderr(&o)
    );
    let o = command("chat")
        .args(["chat", "-m", "/nonexistent/model.gguf"])
        .output()
        .unwrap();
    assert_one_line_error(&o, 1, "/nonexistent/model.gguf");
    let o = command("chat")
        .args(["chat", "-m", &model(), "-n", "-2"])
        .output()
        .unwrap();
    assert_one_line_error(&o, 1, "-n");
    let dir = scratch_dir("chat-templates");
    let broken = dir.join("broken.jinja");
    std::fs::write(&broken, "{% for m in messages %}").unwrap();
    let o = command("chat")
        .args(["chat", "-m", &model(), "--chat-template-file"])
        .arg(&broken)
        .output()
        .unwrap();
    assert_one_line_error(&o, 1, "does not parse");
    // A template that refuses the conversation says so, once.
    let refusing = dir.join("refusing.jinja");
    std::fs::write(
        &refusing,
        "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}",
    )
    .unwrap();
    let o = chat(
        &[
            "--system",
            "hi",
            "--chat-template-file",
            refusing.to_str().unwrap(),
        ],
        "Hello\n",
    );
    let errors = common::error_lines(&o);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(errors.len(), 1, "{}", stderr(&o));
    assert!(
        errors[0].contains("System role not supported"),
        "{errors:?}"
    );
}

#[test]
fn ctrl_c_ends_a_piped_chat() {
    // A script's Ctrl-C ends the program, even while it waits for input.
    let mut child = command("chat")
        .args(["chat", "-m", &model(), "--backend", "cpu"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("backend:") {
        line.clear();
        assert!(
            std::io::BufRead::read_line(&mut err, &mut line).unwrap() > 0,
            "no backend line"
        );
    }
    // The handler is installed before the model loads, so by now.
    // SAFETY: kill only sends a signal to the child this test spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
}

/// A tmux server of this test's own, killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .unwrap()
    }

    fn screen(&self) -> String {
        let o = self.cmd(&["capture-pane", "-p", "-J", "-t", "chat", "-S", "-"]);
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "chat"];
        args.extend_from_slice(keys);
        assert!(self.cmd(&args).status.success());
    }

    /// Waits until `done(screen)` holds, failing with the screen after 60 s.
    fn wait(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if done(&s) {
                return s;
            }
            if start.elapsed() > Duration::from_secs(60) {
                // The end of the screen: a runaway reply fills the rest.
                let tail: String = s.chars().rev().take(3000).collect();
                let tail: String = tail.chars().rev().collect();
                panic!("timed out waiting for {what}; screen ends:\n{tail}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn alive(&self) -> bool {
        self.cmd(&["has-session", "-t", "chat"]).status.success()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

fn tmux_available() -> bool {
    let found = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("ROCMFORGE_REQUIRE_TMUX").as_deref() != Ok("1"),
            "tmux is not installed (ROCMFORGE_REQUIRE_TMUX=1)"
        );
        eprintln!("skipped: tmux is not installed");
    }
    found
}

/// Lines the chat prompted on: `> ` at the start.
fn prompts(screen: &str) -> usize {
    screen.lines().filter(|l| l.starts_with("> ")).count()
}

#[test]
fn interactive_chat_in_a_terminal() {
    if !tmux_available() {
        return;
    }
    let tmux = Tmux {
        socket: format!("rocmforge-chat-test-{}", std::process::id()),
    };
    // Greedy replies of the random model never end on their own within a
    // 16k context, so each reply runs until Ctrl-C stops it.
    let cmd = format!(
        "env ROCMFORGE_CACHE_DIR='{}' '{}' chat -m '{}' --backend cpu --temp 0 -c 16384 --timings --system 'Be brief.'",
        scratch_dir("chat-tmux").display(),
        env!("CARGO_BIN_EXE_rocmforge"),
        model(),
    );
    let o = tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "chat",
        "-x",
        "160",
        "-y",
        "50",
        &cmd,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    tmux.wait("the banner and prompt", |s| {
        s.contains("/clear starts over") && prompts(s) == 1
    });

    // Ctrl-C at the prompt only says how to leave.
    tmux.keys(&["C-c"]);
    tmux.wait("the hint and a new prompt", |s| {
        s.contains("/exit or Ctrl-D leaves)") && prompts(s) == 2
    });
    assert!(tmux.alive());

    for (turn, message) in ["Tell me a story", "Another one"].iter().enumerate() {
        let before = prompts(&tmux.screen());
        tmux.keys(&[message, "Enter"]);
        // Some reply text after the message, then Ctrl-C.
        tmux.wait("a reply to start", |s| {
            s.split_once(&format!("> {message}"))
                .is_some_and(|(_, after)| after.trim().chars().count() > 10)
        });
        tmux.keys(&["C-c"]);
        let s = tmux.wait("the reply to stop and the prompt to return", |s| {
            s.matches("(interrupted)").count() == turn + 1 && prompts(s) == before + 1
        });
        assert!(tmux.alive(), "{s}");
    }
    // The second turn reused the first from the cache.
    let s = tmux.screen();
    let cached: Vec<&str> = s
        .lines()
        .filter_map(|l| l.strip_prefix("prompt: "))
        .collect();
    assert_eq!(cached.len(), 2, "{s}");
    assert!(cached[0].contains("after 0 cached"), "{s}");
    assert!(!cached[1].contains("after 0 cached"), "{s}");

    let before = prompts(&s);
    tmux.keys(&["/clear", "Enter"]);
    tmux.wait("/clear", |s| {
        s.contains("(conversation cleared)") && prompts(s) == before + 1
    });
    tmux.keys(&["/exit", "Enter"]);
    let start = Instant::now();
    while tmux.alive() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "still running after /exit"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// gpt-oss's template, replies made harmony by a grammar: each reply's
/// analysis channel goes to stderr and its final channel to stdout and to
/// the history, so the next turn renders (the template refuses a turn
/// whose content holds channel markers); `--reasoning-format none` prints
/// the reply as written.
#[test]
fn reasoning_goes_to_stderr_and_out_of_the_history() {
    let template = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/chat-templates/gpt-oss.jinja"
    );
    let grammar = r#"root ::= "<|channel|>analysis<|message|>" [a-z]{1,6} "<|end|><|start|>assistant<|channel|>final<|message|>" [a-z]{1,6}"#;
    let args = [
        "--chat-template-file",
        template,
        "--grammar",
        grammar,
        "-n",
        "60",
    ];
    let o = chat(&args, "Hello\nAnd again\n");
    assert!(o.status.success(), "{}", stderr(&o));
    let shown = stdout(&o);
    let replies: Vec<&str> = shown.lines().collect();
    assert_eq!(replies.len(), 2, "{shown}");
    for r in &replies {
        assert!(
            !r.is_empty() && r.chars().all(|c| c.is_ascii_lowercase()),
            "{shown}"
        );
    }
    assert!(!stderr(&o).contains("<|"), "{}", stderr(&o));
    let raw = chat(
        &[&args[..], &["--reasoning-format", "none"]].concat(),
        "Hello\n",
    );
    assert!(raw.status.success(), "{}", stderr(&raw));
    assert!(
        stdout(&raw).starts_with("<|channel|>analysis<|message|>"),
        "{}",
        stdout(&raw)
    );
}
