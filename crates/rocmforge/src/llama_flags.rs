//! llama.cpp's tools spell some flags with one dash and several letters
//! (`-ngl 99`). clap reads those as a cluster of one-letter flags, so they
//! are rewritten to their long forms before parsing; the CLI and `cargo
//! xtask bench` share the table so a llama.cpp command line works in both.

use std::ffi::OsString;

/// llama.cpp spelling → our long flag.
pub const SPELLINGS: &[(&str, &str)] = &[
    ("-ngl", "--n-gpu-layers"),
    // llama-bench's micro-batch size (`cargo xtask bench`).
    ("-ub", "--ubatch-size"),
    // KV cache types.
    ("-ctk", "--cache-type-k"),
    ("-ctv", "--cache-type-v"),
    // llama-server's slots.
    ("-np", "--parallel"),
];

/// `args` with every llama.cpp spelling in [`SPELLINGS`] replaced by its
/// long form. Nothing after `--` is touched: it is positional data.
pub fn long_forms(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut after_separator = false;
    args.into_iter()
        .map(|arg| {
            if after_separator {
                return arg;
            }
            if arg == "--" {
                after_separator = true;
                return arg;
            }
            match SPELLINGS.iter().find(|(short, _)| arg == *short) {
                Some((_, long)) => OsString::from(long),
                None => arg,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewrite(args: &[&str]) -> Vec<String> {
        long_forms(args.iter().map(OsString::from))
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn ngl_becomes_its_long_form_before_the_separator_only() {
        assert_eq!(
            rewrite(&["rocmforge", "generate", "-ngl", "99", "-m", "x.gguf"]),
            [
                "rocmforge",
                "generate",
                "--n-gpu-layers",
                "99",
                "-m",
                "x.gguf"
            ]
        );
        assert_eq!(rewrite(&["bench", "--", "-ngl"]), ["bench", "--", "-ngl"]);
        assert_eq!(
            rewrite(&["-ctk", "q8_0", "-ctv", "q4_0"]),
            ["--cache-type-k", "q8_0", "--cache-type-v", "q4_0"]
        );
        // Flags that merely start the same way are left alone.
        assert_eq!(rewrite(&["-nglx", "-n"]), ["-nglx", "-n"]);
    }
}
