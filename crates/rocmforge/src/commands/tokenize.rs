//! `rocmforge tokenize`: token ids of a text, as llama-tokenize prints them.

use std::path::PathBuf;

use rocmforge_core::tokenizer::Tokenizer;

use super::{open_gguf, write_stdout, CliError};

#[derive(clap::Args)]
pub struct Args {
    /// Model or vocab-only GGUF file.
    #[arg(long)]
    gguf: PathBuf,
    /// Do not add the BOS token even if the file asks for it.
    #[arg(long)]
    no_bos: bool,
    /// Treat special-token text such as `<|im_end|>` as plain text.
    #[arg(long)]
    no_parse_special: bool,
    /// Read the text from a file.
    #[arg(long, conflicts_with = "text")]
    file: Option<PathBuf>,
    /// The text to tokenize.
    #[arg(required_unless_present = "file")]
    text: Option<String>,
}

pub fn run(args: Args) -> Result<(), CliError> {
    let text = match (&args.file, &args.text) {
        (Some(f), _) => {
            std::fs::read_to_string(f).map_err(|e| format!("cannot read {}: {e}", f.display()))?
        }
        (None, Some(t)) => t.clone(),
        (None, None) => unreachable!("clap requires one of them"),
    };
    let file = open_gguf(&args.gguf)?;
    let tok = Tokenizer::from_gguf(&file)?;
    let ids = tok.encode(
        &text,
        tok.add_bos_default() && !args.no_bos,
        !args.no_parse_special,
    );
    let line: Vec<String> = ids.iter().map(u32::to_string).collect();
    write_stdout(
        &mut std::io::stdout().lock(),
        format!("{}\n", line.join(" ")).as_bytes(),
    )
}
