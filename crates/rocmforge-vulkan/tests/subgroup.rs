//! The subgroup size pipelines use: reported in the device line, and an
//! impossible `ROCMFORGE_VULKAN_SUBGROUP_SIZE` (here through
//! `VulkanOptions::subgroup_size`, which `from_env` fills from it) is a
//! one-line `BadOption` error naming the value, not a panic.
//!
//! Skips (printing why) when no Vulkan device is present, unless
//! `ROCMFORGE_REQUIRE_BACKENDS` names `vulkan`: then it fails.

mod common;

use rocmforge_core::backend::BackendError;
use rocmforge_core::gpu::GpuDevice;
use rocmforge_vulkan::{SubgroupSize, VulkanBackend, VulkanOptions};

fn open(subgroup_size: SubgroupSize) -> Result<VulkanBackend, BackendError> {
    common::open(VulkanOptions {
        subgroup_size,
        ..common::options()
    })
}

#[test]
fn impossible_subgroup_sizes_are_refused_with_one_line() {
    let Some(b) = common::open_or_skip(common::options()) else {
        return;
    };
    let (size, pinned) = b.device().subgroup_size();
    let summary = b.device().summary();
    eprintln!("{summary}");
    assert!(
        summary.contains(&format!("| subgroup: {size} (")),
        "{summary}"
    );
    eprintln!("subgroup size {size}, pinned: {pinned}");
    // A device with one size says "fixed", pinned or not.
    if summary.contains("(pinned,") {
        assert!(pinned, "{summary}");
    } else {
        assert!(!pinned || summary.contains("(fixed)"), "{summary}");
    }
    drop(b);

    // The size in use and the driver's default can be asked for.
    for want in [SubgroupSize::Pin(size), SubgroupSize::Driver] {
        let b = open(want.clone()).unwrap_or_else(|e| panic!("{want:?}: {e}"));
        eprintln!("{want:?}: {}", b.device().summary());
    }

    for (want, says) in [
        (SubgroupSize::Pin(3), "ROCMFORGE_VULKAN_SUBGROUP_SIZE=3: "),
        (
            SubgroupSize::Pin(4096),
            "ROCMFORGE_VULKAN_SUBGROUP_SIZE=4096: ",
        ),
        (
            SubgroupSize::Invalid("wave64".into()),
            "ROCMFORGE_VULKAN_SUBGROUP_SIZE=\"wave64\": ",
        ),
    ] {
        match open(want.clone()) {
            Err(e @ BackendError::BadOption { .. }) => {
                let why = e.to_string();
                eprintln!("{want:?}: {why}");
                assert!(why.contains(says), "{why}");
                assert!(!why.contains('\n'), "{why}");
            }
            Err(e) => panic!("{want:?}: not BadOption: {e}"),
            Ok(b) => panic!("{want:?} was accepted: {}", b.device().summary()),
        }
    }
}
