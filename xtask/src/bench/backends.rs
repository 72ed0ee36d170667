//! Which backends a `--backend` list names: the registry's, plus the GPU
//! backends the project plans but this binary may not contain yet, so that
//! asking for one gives its reason instead of "unknown backend".

use rocmforge::registry;
use rocmforge_core::quant::QuantType;

/// Backends the project knows of, with their aliases, whether or not the
/// registry has them. Checked after the registry, so a backend that gets
/// built in stops being reported as absent without a change here.
const PLANNED: &[(&str, &[&str])] = &[("rocm", &["hip"]), ("vulkan", &[])];

/// One item of the `--backend` list, as typed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    All,
    One(Resolved),
}

/// A backend by its canonical name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolved {
    /// In the registry (it may still fail to start on this machine).
    Registry(&'static str),
    /// Known to the project but not built into this binary.
    Absent(&'static str),
}

impl Resolved {
    pub fn name(self) -> &'static str {
        match self {
            Resolved::Registry(name) | Resolved::Absent(name) => name,
        }
    }
}

/// A backend to run, and whether the user named it (then its failure is the
/// command's failure) or it came from `all` (then it is only reported).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    pub backend: Resolved,
    pub by_name: bool,
}

fn lookup(name: &str) -> Option<Resolved> {
    if let Some(entry) = registry::find(name) {
        return Some(Resolved::Registry(entry.name));
    }
    let lower = name.to_ascii_lowercase();
    PLANNED
        .iter()
        .find(|(n, aliases)| *n == lower || aliases.contains(&lower.as_str()))
        .map(|(n, _)| Resolved::Absent(n))
}

/// Every backend `all` stands for: the registry's, then the planned ones it
/// lacks.
fn all_backends() -> Vec<Resolved> {
    let mut list: Vec<Resolved> = registry::backends()
        .iter()
        .map(|b| Resolved::Registry(b.name))
        .collect();
    for (name, _) in PLANNED {
        if registry::find(name).is_none() {
            list.push(Resolved::Absent(name));
        }
    }
    list
}

/// clap value parser for one `--backend` item.
pub fn parse_choice(name: &str) -> Result<BackendChoice, String> {
    if name.eq_ignore_ascii_case("all") {
        return Ok(BackendChoice::All);
    }
    lookup(name).map(BackendChoice::One).ok_or_else(|| {
        let known: Vec<&str> = all_backends().iter().map(|b| b.name()).collect();
        format!(
            "unknown backend '{name}' (known: {}, all)",
            known.join(", ")
        )
    })
}

/// Expands `all` and drops repeats (`cpu,all` runs cpu once, as named).
pub fn resolve(choices: &[BackendChoice]) -> Vec<Target> {
    let mut targets: Vec<Target> = Vec::new();
    let mut push = |backend: Resolved, by_name: bool| {
        if let Some(t) = targets.iter_mut().find(|t| t.backend == backend) {
            t.by_name |= by_name;
        } else {
            targets.push(Target { backend, by_name });
        }
    };
    for choice in choices {
        match *choice {
            BackendChoice::All => all_backends().into_iter().for_each(|b| push(b, false)),
            BackendChoice::One(b) => push(b, true),
        }
    }
    targets
}

pub fn absent_reason(name: &str) -> String {
    format!("not built into this binary (the registry has no '{name}' backend yet)")
}

/// clap value parser for `--type`: the types gen-model can write.
pub fn parse_weight_type(name: &str) -> Result<QuantType, String> {
    match QuantType::from_name(name) {
        Some(ty) if ty.is_supported() => Ok(ty),
        _ => Err(format!("unknown or unsupported weight type '{name}'")),
    }
}
