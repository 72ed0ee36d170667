//! Mixture-of-experts weights stay in the file's mapping: loading touches
//! every other weight, but an expert's pages become resident only when a
//! step routes a token to it. Alone in its test binary, since it reads the
//! process's resident set size.

use std::sync::Arc;

use indicatif::ProgressBar;
use rocmforge_core::expert_offload::expert_weights;
use rocmforge_core::model::Model;
use rocmforge_core::quant::QuantType;
use rocmforge_core::session::{Session, SessionOptions};
use rocmforge_cpu::CpuBackend;
use rocmforge_genmodel::presets::MoeShape;

/// Resident bytes of this process's file mappings (`RssFile` of
/// /proc/self/status): the weights' pages, not the arena's.
fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("RssFile:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

#[test]
fn experts_fault_in_only_when_routed_to() {
    // tiny-mixtral with 256 experts of 512: 214 MB of experts, 2 per token.
    let preset = rocmforge_genmodel::Preset {
        name: "moe-residency",
        moe: Some(MoeShape {
            n_expert: 256,
            n_expert_used: 2,
            n_ff_exp: 512,
            n_ff_shared: None,
        }),
        n_ff: 512,
        ..*rocmforge_genmodel::find("tiny-mixtral").unwrap()
    };
    let dir = rocmforge_genmodel::repo_root().join("target/conformance-models");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("moe-residency-{}.gguf", std::process::id()));
    rocmforge_genmodel::write_file(
        &preset,
        QuantType::Q8_0,
        rocmforge_genmodel::DEFAULT_SEED,
        &path,
        &ProgressBar::hidden(),
    )
    .unwrap();
    let model = Arc::new(Model::load(&path).unwrap());
    std::fs::remove_file(&path).unwrap();
    let experts: u64 = expert_weights(&model, model.config.n_layer)
        .into_iter()
        .map(|id| model.weights.get(id).n_bytes)
        .sum();
    assert!(experts > 200 << 20, "{experts} bytes of experts");

    let before = resident_bytes();
    let opts = SessionOptions {
        kv_types: Default::default(),
        n_ctx: 64,
        n_batch: 16,
        all_logits: false,
        n_seq: 1,
    };
    let mut s = Session::new(
        Arc::clone(&model),
        Box::new(CpuBackend::new(2)),
        opts,
        &mut |_, _| {},
    )
    .unwrap();
    let loaded = resident_bytes().saturating_sub(before);
    // One decode step routes to 2 of 256 experts in each of 2 layers.
    s.eval(&[1]).unwrap();
    let stepped = resident_bytes().saturating_sub(before);
    eprintln!(
        "experts {} MiB; resident after load +{} MiB, after one token +{} MiB",
        experts >> 20,
        loaded >> 20,
        stepped >> 20
    );
    // The rest of the weights (two embedding tables of 8 MiB, attention)
    // is well under a quarter of the experts. A step maps the routed
    // experts' pages, in the page cache's folios (up to 2 MiB each where
    // the filesystem uses large folios: +24 MiB was measured here for the
    // 4 routed expert slices x 3 matrices of 139 KiB), far from all.
    assert!(loaded < experts / 4, "load made the experts resident");
    assert!(stepped < experts / 2, "one token made the experts resident");
}
