//! rocmforge: the command line and the backend registry.
//!
//! The CLI and xtask reach compute backends only through
//! [`rocmforge_core::backend::Backend`] and this registry, so a new backend
//! plugs in by adding one entry here. Which backend a run gets by default is
//! decided by [`auto`], from probes run in child processes ([`probe`]),
//! because a GPU stack that hangs cannot be detected from inside the process
//! it hangs.

// A closed stdout or stderr pipe makes these macros panic.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod auto;
pub mod doctor;
pub mod fault;
pub mod llama_flags;
pub mod probe;
pub mod registry;
