//! rocmforge: the command line and the backend registry.
//!
//! The CLI and xtask reach compute backends only through
//! [`rocmforge_core::backend::Backend`] and this registry, so a new backend
//! plugs in by adding one entry here.

pub mod registry;
