//! `rocmforge info`: a GGUF file's metadata and tensor table.

use std::fmt::Write as _;
use std::path::PathBuf;

use rocmforge_core::gguf::GgufValue;

use super::{open_gguf, write_stdout, CliError};

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF file.
    path: PathBuf,
}

/// Long arrays (vocabularies) are summarised: their first few items tell
/// what they hold.
fn show(v: &GgufValue) -> String {
    match v {
        GgufValue::String(s) => format!("{s:?}"),
        GgufValue::Array(items) => {
            let head: Vec<String> = items.iter().take(4).map(show).collect();
            let more = if items.len() > 4 { ", ..." } else { "" };
            format!("[{}{}] ({} items)", head.join(", "), more, items.len())
        }
        GgufValue::U8(x) => x.to_string(),
        GgufValue::I8(x) => x.to_string(),
        GgufValue::U16(x) => x.to_string(),
        GgufValue::I16(x) => x.to_string(),
        GgufValue::U32(x) => x.to_string(),
        GgufValue::I32(x) => x.to_string(),
        GgufValue::U64(x) => x.to_string(),
        GgufValue::I64(x) => x.to_string(),
        GgufValue::F32(x) => x.to_string(),
        GgufValue::F64(x) => x.to_string(),
        GgufValue::Bool(x) => x.to_string(),
    }
}

pub fn run(args: Args) -> Result<(), CliError> {
    let f = open_gguf(&args.path)?;
    let mut out = String::new();
    writeln!(out, "file:      {}", args.path.display())?;
    writeln!(out, "version:   {}", f.version())?;
    writeln!(out, "size:      {} bytes", f.file_size())?;
    writeln!(out, "alignment: {}", f.alignment())?;
    writeln!(out, "\nmetadata ({} keys):", f.metadata().len())?;
    for (k, v) in f.metadata() {
        writeln!(out, "  {k:<44} {:<14} {}", v.type_name(), show(v))?;
    }
    writeln!(out, "\ntensors ({}):", f.tensors().len())?;
    writeln!(
        out,
        "  {:<40} {:<8} {:<22} {:>12}",
        "name", "type", "shape", "bytes"
    )?;
    let mut total = 0u64;
    for t in f.tensors() {
        let shape: Vec<String> = t.shape.iter().map(u64::to_string).collect();
        writeln!(
            out,
            "  {:<40} {:<8} {:<22} {:>12}",
            t.name,
            t.ty.name(),
            shape.join(" x "),
            t.n_bytes
        )?;
        total += t.n_bytes;
    }
    let params: u64 = f.tensors().iter().map(|t| t.n_elements()).sum();
    writeln!(
        out,
        "\n{} parameters, {} bytes of tensor data",
        params, total
    )?;
    write_stdout(&mut std::io::stdout().lock(), out.as_bytes())
}
