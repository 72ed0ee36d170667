//! One module per subcommand. Each returns a [`CliError`], printed as one line
//! by `main`.

pub mod generate;
pub mod info;
pub mod tokenize;

use std::path::Path;

use rocmforge_core::gguf::GgufFile;

/// Any failure, already worded for the user.
pub type CliError = Box<dyn std::error::Error>;

/// Opens a GGUF file with the path in the error, since the reader's errors
/// say what is wrong but not which file.
pub fn open_gguf(path: &Path) -> Result<GgufFile, CliError> {
    GgufFile::open(path).map_err(|e| format!("{}: {e}", path.display()).into())
}

/// Writes to stdout; a closed pipe (`| head`) ends the program quietly
/// instead of panicking like `println!`.
pub fn write_stdout(out: &mut impl std::io::Write, bytes: &[u8]) -> Result<(), CliError> {
    match out.write_all(bytes).and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        r => Ok(r?),
    }
}
