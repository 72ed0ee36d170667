//! One module per subcommand. Each returns a [`CliError`], printed as one line
//! by `main`.

pub mod backend_choice;
pub mod cache_types;
pub mod chat;
pub mod devices;
pub mod doctor;
pub mod doctor_probe;
pub mod generate;
pub mod info;
pub mod perplexity;
pub mod probe_case;
pub mod reasoning_args;
pub mod sampling_args;
pub mod serve;
pub mod text_input;
pub mod tokenize;

use std::path::Path;

use rocmforge_core::gguf::GgufFile;

/// Any failure, already worded for the user.
pub type CliError = Box<dyn std::error::Error>;

/// Opens a GGUF file with the path in the error, since the reader's errors
/// say what is wrong but not which file.
pub fn open_gguf(path: &Path) -> Result<GgufFile, CliError> {
    check_model_path(path)?;
    GgufFile::open(path).map_err(|e| format!("{}: {e}", path.display()).into())
}

/// What the OS would say about a path that is no file, in the user's terms:
/// mapping a directory fails with "No such device (os error 19)".
pub fn check_model_path(path: &Path) -> Result<(), CliError> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => {
            Err(format!("{}: is a directory, not a GGUF file", path.display()).into())
        }
        Ok(m) if !m.is_file() => Err(format!(
            "{}: is not a regular file (a GGUF model is read by mapping it)",
            path.display()
        )
        .into()),
        _ => Ok(()),
    }
}

/// Writes one line to stderr. A closed or full stderr loses the line
/// instead of panicking as `eprintln!` does: diagnostics must never be what
/// takes a run down.
pub fn note(line: &str) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
}

/// Writes to stdout; a closed pipe (`| head`) ends the program quietly
/// instead of panicking like `println!`.
pub fn write_stdout(out: &mut impl std::io::Write, bytes: &[u8]) -> Result<(), CliError> {
    match out.write_all(bytes).and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        r => Ok(r?),
    }
}
