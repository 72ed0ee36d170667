//! Text the user hands in by file or on stdin (`-f FILE`, `-f -`, `-p -`),
//! read as llama.cpp's tools read it.

use std::io::Read;
use std::path::Path;

use super::CliError;

/// The text of `path`, or of stdin when `path` is `-`, without its final
/// newline: the newline an editor or `echo` adds would otherwise be the
/// text's last token (llama.cpp's `-f` drops it too). `what` names the
/// text in errors ("the prompt", "the text").
pub fn read_text(path: &Path, what: &str) -> Result<String, CliError> {
    let (bytes, source) = if path.as_os_str() == "-" {
        let mut bytes = Vec::new();
        std::io::stdin()
            .read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read {what} from stdin: {e}"))?;
        (bytes, "stdin".to_string())
    } else {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        (bytes, path.display().to_string())
    };
    let mut text =
        String::from_utf8(bytes).map_err(|_| format!("{source}: {what} is not UTF-8 text"))?;
    if text.ends_with('\n') {
        text.pop();
    }
    Ok(text)
}
