//! The sampling flags `generate` and `chat` share, as llama.cpp spells
//! them, and the seed they resolve to.

use rocmforge_core::sampler::SamplerConfig;

#[derive(clap::Args)]
pub struct SamplingArgs {
    /// Temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.8)]
    pub temp: f32,
    /// Top-k (0 = off).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Top-p (1.0 = off).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Min-p (0.0 = off).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Repetition penalty (1.0 = off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Last tokens the repetition penalty considers.
    #[arg(long, default_value_t = 64)]
    pub repeat_last_n: usize,
    /// Sampling seed: the same seed gives the same output. -1 (the default)
    /// picks a random one and prints it to stderr (where sampling draws
    /// on it: --temp above 0).
    #[arg(
        long,
        short = 's',
        value_name = "N",
        default_value = "-1",
        allow_negative_numbers = true,
        value_parser = parse_seed
    )]
    pub seed: Seed,
}

impl SamplingArgs {
    /// The sampler's settings with `seed` (the resolved [`Seed`]).
    pub fn config(&self, seed: u64) -> SamplerConfig {
        SamplerConfig {
            temperature: self.temp,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            seed,
        }
    }

    /// Whether to print the seed: a random one that sampling draws on
    /// (greedy decoding, --temp 0, draws none: its seed would be noise).
    pub fn prints_seed(&self) -> bool {
        self.seed == Seed::Random && self.temp > 0.0
    }
}

/// `-s`: a fixed seed, or a random one (`-1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seed {
    Fixed(u64),
    Random,
}

pub fn parse_seed(s: &str) -> Result<Seed, String> {
    match s.trim() {
        "-1" => Ok(Seed::Random),
        t => t.parse().map(Seed::Fixed).map_err(|_| {
            format!(
                "expected a seed from 0 to {}, or -1 for a random one",
                u64::MAX
            )
        }),
    }
}

impl Seed {
    /// The seed to use; a random one differs between runs (the hash
    /// keys of std's `RandomState` are drawn from the OS once per process,
    /// and the time and process id are mixed in on top).
    pub fn resolve(self) -> u64 {
        match self {
            Seed::Fixed(s) => s,
            Seed::Random => {
                use std::hash::BuildHasher;
                std::collections::hash_map::RandomState::new()
                    .hash_one((std::time::SystemTime::now(), std::process::id()))
            }
        }
    }
}
