//! Runs `rocmforge_core_fuzz::model_load` (`../src/lib.rs`), the check the
//! corpus replay under `cargo test` runs too.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| rocmforge_core_fuzz::model_load(data));
