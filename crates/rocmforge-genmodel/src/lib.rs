//! rocmforge-genmodel: GGUF files of real models' exact shapes, filled with
//! seeded random weights.
//!
//! Nothing can be downloaded on the machines this project is built and
//! tested on, yet speed depends only on shapes and types, and agreement
//! between backends only on both computing the same function. So tests,
//! the conformance suite and benchmarks all run on files this crate writes:
//! the tensor names, shapes, metadata and tokenizers of llama.cpp-converted
//! models, with weights drawn per row from a seeded generator, so the same
//! seed gives the same bytes on any machine. A library rather than only the
//! `cargo xtask gen-model` command, because test suites generate their
//! models themselves.

pub mod model;
pub mod presets;

pub use model::{cached, write_file, GenError, DEFAULT_SEED};
pub use presets::{find, Preset};

/// The repository root: where this crate was built from, or, for a binary
/// carried to another machine (the lent GPU), the current directory when it
/// holds the repository's `testdata/`.
pub fn repo_root() -> std::path::PathBuf {
    let built = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    if built.join("testdata").is_dir() {
        return built;
    }
    std::env::current_dir()
        .ok()
        .filter(|d| d.join("testdata").is_dir())
        .unwrap_or(built)
}
