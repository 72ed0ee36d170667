//! `rocmforge probe-case` (hidden): the child side of a backend probe. Run by
//! `--backend auto` and `doctor --probe` in a separate process under a hard
//! deadline; prints one JSON line per event (`rocmforge::probe::case`).

use rocmforge::probe::{case, shapes};
use rocmforge_core::quant::QuantType;

use super::CliError;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    backend: String,
    #[arg(long)]
    device: Option<usize>,
    /// Weight type of the generated model.
    #[arg(long = "type")]
    ty: String,
    /// A shape of `rocmforge::probe::shapes`.
    #[arg(long)]
    shape: String,
    /// Prompt lengths, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    prompts: Vec<usize>,
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    gpu_timeout: f64,
}

pub fn run(a: Args) -> Result<(), CliError> {
    let ty = QuantType::from_name(&a.ty).ok_or_else(|| format!("unknown weight type {}", a.ty))?;
    let shape = shapes::find(&a.shape).ok_or_else(|| format!("unknown probe shape {}", a.shape))?;
    if a.prompts.contains(&0) {
        return Err("prompt lengths must be positive".into());
    }
    let spec = case::CaseSpec {
        backend: a.backend,
        device: a.device,
        ty,
        shape,
        prompts: a.prompts,
        gpu_timeout: super::generate::gpu_timeout(a.gpu_timeout)?,
    };
    let mut out = std::io::stdout().lock();
    case::run(&spec, &mut out)?;
    Ok(())
}
