//! Opening a shared library from a list of candidates, and resolving its
//! functions into typed pointers, with the errors the crate promises: one
//! "not found" naming every candidate, or the loader's own reason when a
//! library exists but cannot be loaded, or the missing symbol's name.

use std::path::{Path, PathBuf};

use libloading::Library;

use crate::error::HipError;
use crate::types::Flavor;

/// A library and the candidate it was opened from.
pub(crate) struct Opened {
    pub lib: Library,
    pub path: String,
}

/// Opens the first candidate that loads. A candidate with a `/` is a path
/// and skipped when absent; a bare name goes through the dynamic loader's
/// search (`LD_LIBRARY_PATH`, the ld.so cache).
pub(crate) fn open_first(flavor: Flavor, candidates: &[PathBuf]) -> Result<Opened, HipError> {
    let mut refused: Option<(String, String)> = None;
    for path in candidates {
        let is_path = path.components().count() > 1;
        if is_path && !path.exists() {
            continue;
        }
        // SAFETY: opening runs the library's initialisers. The candidates
        // are the HIP runtime or the CUDA driver (or, in tests, libraries
        // known to be harmless), whose initialisers only set up the runtime:
        // loading them is what using them means.
        match unsafe { Library::new(path) } {
            Ok(lib) => {
                return Ok(Opened {
                    lib,
                    path: path.display().to_string(),
                })
            }
            Err(e) => {
                let message = e.to_string();
                if refused.is_none() && !names_itself_missing(path, &message) {
                    refused = Some((path.display().to_string(), message));
                }
            }
        }
    }
    Err(match refused {
        Some((path, message)) => HipError::LoadFailed {
            flavor,
            path,
            message,
        },
        None => HipError::NotFound {
            flavor,
            tried: candidates.iter().map(|p| p.display().to_string()).collect(),
        },
    })
}

/// Whether a dlopen error says that `path` itself is missing, as opposed to
/// one of its dependencies ("libhsa-runtime64.so.1: cannot open shared
/// object file"), which is worth reporting as such.
fn names_itself_missing(path: &Path, message: &str) -> bool {
    let name = path.display().to_string();
    message.starts_with(&format!("{name}: cannot open shared object file"))
}

/// Resolves `name` to a function pointer of type `T`.
///
/// # Safety
///
/// `T` must be an `unsafe extern "C" fn` type matching the C prototype of
/// `name` in the library's headers, and the returned pointer must not be
/// called after `lib` is closed (the crate keeps every library it resolves
/// from open for the life of the process).
pub(crate) unsafe fn symbol<T: Copy>(
    flavor: Flavor,
    opened: &Opened,
    name: &'static str,
) -> Result<T, HipError> {
    // SAFETY: the caller guarantees that `T` is the symbol's true type.
    match unsafe { opened.lib.get::<T>(name.as_bytes()) } {
        Ok(sym) => Ok(*sym),
        Err(_) => Err(HipError::MissingSymbol {
            flavor,
            library: opened.path.clone(),
            symbol: name,
        }),
    }
}

/// Deduplicates candidates, keeping the first of each.
pub(crate) fn dedup(candidates: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::with_capacity(candidates.len());
    for c in candidates {
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_candidates_give_one_not_found() {
        let tried = [
            PathBuf::from("/nonexistent/rocmforge/libamdhip64.so"),
            PathBuf::from("librocmforge-test-no-such-library.so.6"),
        ];
        let e = open_first(Flavor::Hip, &tried)
            .err()
            .expect("nothing to open");
        assert_eq!(
            e.to_string(),
            "HIP runtime not found (tried /nonexistent/rocmforge/libamdhip64.so, \
             librocmforge-test-no-such-library.so.6): install ROCm 6.x/7.x or set ROCM_PATH"
        );
    }

    #[test]
    fn a_library_that_cannot_load_says_why() {
        let dir = std::env::temp_dir().join(format!("hip-sys-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("libamdhip64.so");
        std::fs::write(&fake, b"not an ELF file").unwrap();
        let e = open_first(
            Flavor::Hip,
            &[PathBuf::from("/nonexistent/x.so"), fake.clone()],
        )
        .err()
        .expect("garbage does not load");
        std::fs::remove_dir_all(&dir).unwrap();
        match &e {
            HipError::LoadFailed { path, message, .. } => {
                assert_eq!(path, &fake.display().to_string());
                assert!(!message.is_empty());
            }
            other => panic!("expected LoadFailed, got {other:?}"),
        }
        assert!(e.to_string().starts_with(&format!(
            "HIP runtime {} could not be loaded: ",
            fake.display()
        )));
    }

    #[test]
    fn dedup_keeps_order() {
        let v = dedup(vec!["a".into(), "b".into(), "a".into(), "c".into()]);
        assert_eq!(v, [PathBuf::from("a"), "b".into(), "c".into()]);
    }
}
