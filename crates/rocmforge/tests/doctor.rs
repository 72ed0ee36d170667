//! `rocmforge doctor` against fake sysfs/proc roots built here: each known
//! issue on the machine it is about, and the binary end to end.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use rocmforge::doctor::{self, known_issues, report, system, Diagnosis, Environment, SysRoot};

const GIB: u64 = 1 << 30;

/// A directory standing for `/`, removed when dropped.
struct FakeRoot {
    dir: PathBuf,
}

impl FakeRoot {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("rocmforge-doctor-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let root = FakeRoot { dir };
        root.file("/proc/cmdline", "BOOT_IMAGE=/vmlinuz ro quiet");
        root
    }

    fn file(&self, path: &str, text: &str) -> &Self {
        let p = self.dir.join(path.trim_start_matches('/'));
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
        self
    }

    fn mkdir(&self, path: &str) -> &Self {
        fs::create_dir_all(self.dir.join(path.trim_start_matches('/'))).unwrap();
        self
    }

    fn kernel(&self, release: &str) -> &Self {
        self.file("/proc/sys/kernel/osrelease", release)
    }

    fn cwsr_param(&self, v: i32) -> &Self {
        self.file("/sys/module/amdgpu/parameters/cwsr_enable", &v.to_string())
    }

    /// An amdgpu card with its KFD node, render node and `/dev` entries.
    fn gpu(&self, card: u32, slot: &str, node: u32, target: u32, vram: u64, gtt: u64) -> &Self {
        let dev = format!("/sys/class/drm/card{card}/device");
        self.file(&format!("{dev}/vendor"), "0x1002")
            .file(&format!("{dev}/device"), "0x744c")
            .file(
                &format!("{dev}/uevent"),
                &format!("DRIVER=amdgpu\nPCI_SLOT_NAME={slot}\n"),
            )
            .file(&format!("{dev}/mem_info_vram_total"), &vram.to_string())
            .file(&format!("{dev}/mem_info_gtt_total"), &gtt.to_string())
            .mkdir(&format!("{dev}/drm/renderD{}", 128 + card))
            .file(&format!("/dev/dri/renderD{}", 128 + card), "")
            .file("/dev/kfd", "");
        // The CPU node KFD lists first, with target version 0.
        self.file(
            "/sys/class/kfd/kfd/topology/nodes/0/properties",
            "cpu_cores_count 16\nsimd_count 0\ngfx_target_version 0\nlocation_id 0\ndomain 0\n",
        );
        let bus = u64::from_str_radix(&slot[5..7], 16).unwrap();
        self.file(
            &format!("/sys/class/kfd/kfd/topology/nodes/{node}/properties"),
            &format!(
                "cpu_cores_count 0\nsimd_count 192\nvendor_id 4098\ngfx_target_version \
                 {target}\nlocation_id {}\ndomain 0\n",
                bus << 8
            ),
        )
    }

    fn mes(&self, card: u32, version: &str) -> &Self {
        self.file(
            &format!("/sys/class/drm/card{card}/device/fw_version/mes_fw_version"),
            version,
        )
    }

    fn radv(&self) -> &Self {
        self.file(
            "/usr/share/vulkan/icd.d/radeon_icd.x86_64.json",
            r#"{"ICD": {"api_version": "1.3.296", "library_path": "libvulkan_radeon.so"}}"#,
        )
    }

    fn rocm(&self, version: &str) -> &Self {
        self.file("/opt/rocm/.info/version", version)
            .file("/opt/rocm/lib/libamdhip64.so.6", "")
    }

    fn open(&self) -> SysRoot {
        SysRoot::open(&self.dir).unwrap()
    }
}

impl Drop for FakeRoot {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn env(pairs: &[(&str, &str)]) -> Environment {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn built(targets: &[&str]) -> Vec<String> {
    targets.iter().map(|t| t.to_string()).collect()
}

const ALL: &[&str] = &["gfx1100", "gfx1151", "gfx1010", "gfx1030"];

fn diagnose(root: &FakeRoot, vars: &[(&str, &str)], targets: &[&str]) -> Diagnosis {
    doctor::diagnose(&root.open(), &env(vars), &built(targets))
}

fn ids(d: &Diagnosis) -> Vec<&'static str> {
    d.findings.iter().map(|f| f.id).collect()
}

/// An RX 7900 XTX (gfx1100) with ROCm 6.4.4 and RADV.
fn rx7900xtx(name: &str, kernel: &str, cwsr: i32, mes: &str) -> FakeRoot {
    let root = FakeRoot::new(name);
    root.gpu(1, "0000:03:00.0", 1, 110000, 24 * GIB, 31 * GIB)
        .kernel(kernel)
        .cwsr_param(cwsr)
        .mes(1, mes)
        .radv()
        .rocm("6.4.4-120");
    root
}

/// A Strix Halo (gfx1151 APU) with a 512 MiB carve-out.
fn strix_halo(name: &str) -> FakeRoot {
    let root = FakeRoot::new(name);
    root.gpu(0, "0000:c5:00.0", 1, 110501, GIB / 2, 96 * GIB)
        .kernel("6.18.2")
        .cwsr_param(0)
        .mes(0, "0x00000080")
        .radv()
        .rocm("6.4.4-120");
    root
}

#[test]
fn rdna3_on_old_kernel_with_cwsr_and_mes_0x83_is_flagged() {
    let root = rx7900xtx("xtx-bad", "6.8.0-45-generic", 1, "0x00000083");
    let d = diagnose(&root, &[], ALL);
    let g = &d.system.gpus[0];
    assert_eq!(g.gfx.as_deref(), Some("gfx1100"));
    assert_eq!(g.pci_slot.as_deref(), Some("0000:03:00.0"));
    assert!(!g.apu);
    assert_eq!(d.system.firmware[0].mes, Some(0x83));
    assert!(ids(&d).contains(&"rdna3-cwsr-hang"), "{:?}", ids(&d));
    assert!(ids(&d).contains(&"mes-firmware-0x83"), "{:?}", ids(&d));
    // Errors come first.
    assert_eq!(d.findings[0].id, "mes-firmware-0x83");
}

#[test]
fn rdna3_with_cwsr_off_on_6_18_is_clean() {
    let root = rx7900xtx("xtx-good", "6.18.2-arch1", 0, "0x00000080");
    let d = diagnose(&root, &[], ALL);
    assert!(d.findings.is_empty(), "{:?}", ids(&d));
}

#[test]
fn module_parameter_beats_the_command_line() {
    let root = rx7900xtx("xtx-cmdline", "6.8.0", 1, "0x00000080");
    root.file("/proc/cmdline", "ro amdgpu.cwsr_enable=0");
    let d = diagnose(&root, &[], ALL);
    assert_eq!(d.system.settings.cwsr.cmdline, Some(0));
    assert!(ids(&d).contains(&"rdna3-cwsr-hang"), "{:?}", ids(&d));
    // Without the driver's parameter the command line is what will apply.
    fs::remove_file(root.dir.join("sys/module/amdgpu/parameters/cwsr_enable")).unwrap();
    let d = diagnose(&root, &[], ALL);
    assert!(!ids(&d).contains(&"rdna3-cwsr-hang"), "{:?}", ids(&d));
}

#[test]
fn strix_halo_without_sdma_off_is_flagged() {
    let root = strix_halo("strix-sdma");
    let d = diagnose(&root, &[], ALL);
    assert!(d.system.gpus[0].apu);
    assert_eq!(d.system.gpus[0].gfx.as_deref(), Some("gfx1151"));
    assert_eq!(ids(&d), ["strix-sdma-stall"]);
    let d = diagnose(&root, &[("HSA_ENABLE_SDMA", "1")], ALL);
    assert_eq!(ids(&d), ["strix-sdma-stall"]);
    let d = diagnose(&root, &[("HSA_ENABLE_SDMA", "0")], ALL);
    assert!(d.findings.is_empty(), "{:?}", ids(&d));
}

#[test]
fn apu_behind_translating_iommu_is_noted() {
    let root = strix_halo("strix-iommu");
    root.file("/sys/class/drm/card0/device/iommu_group/type", "DMA-FQ");
    let d = diagnose(&root, &[("HSA_ENABLE_SDMA", "0")], ALL);
    assert_eq!(ids(&d), ["apu-iommu-translated"]);
    root.file("/sys/class/drm/card0/device/iommu_group/type", "identity");
    let d = diagnose(&root, &[("HSA_ENABLE_SDMA", "0")], ALL);
    assert!(d.findings.is_empty(), "{:?}", ids(&d));
}

#[test]
fn rdna1_is_flagged() {
    let root = FakeRoot::new("rdna1");
    root.gpu(0, "0000:0a:00.0", 1, 100100, 8 * GIB, 16 * GIB)
        .kernel("6.18.0")
        .radv()
        .rocm("6.4.4");
    let d = diagnose(&root, &[], ALL);
    assert_eq!(d.system.gpus[0].gfx.as_deref(), Some("gfx1010"));
    assert_eq!(ids(&d), ["rdna1-unsupported"]);
}

#[test]
fn rocm_7_0_gets_the_regression_note() {
    let root = rx7900xtx("rocm7", "6.18.0", 0, "0x00000080");
    root.rocm("7.0.1-42");
    let d = diagnose(&root, &[], ALL);
    assert_eq!(ids(&d), ["rocm-7.0-regressions"]);
    assert!(d.findings[0].message.contains("7.0.1-42"));
    assert!(d.findings[0].message.contains("reported"));
    root.rocm("7.1.0");
    assert!(diagnose(&root, &[], ALL).findings.is_empty());
}

#[test]
fn no_gpu_says_so_and_what_remains() {
    let root = FakeRoot::new("no-gpu");
    root.kernel("6.18.44").file(
        "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json",
        r#"{"ICD": {"api_version": "1.1.230", "library_path": "libvulkan_lvp.so"}}"#,
    );
    let d = diagnose(&root, &[], ALL);
    assert!(d.system.gpus.is_empty());
    assert_eq!(ids(&d), ["no-amd-gpu"]);
    let f = &d.findings[0];
    assert!(f.message.starts_with("no AMD GPU found"), "{}", f.message);
    assert!(f.advice.contains("--backend cpu") && f.advice.contains("lavapipe"));
    let text = report::text(&d);
    assert!(text.contains("/sys/class/drm"), "{text}");
    assert!(text.contains("lavapipe"), "{text}");
}

#[test]
fn an_nvidia_gpu_in_a_container_is_offered_to_vulkan() {
    // The lent GPU's machine: no DRM cards in the container, NVIDIA's
    // driver listing its GPU under /proc, and ROCm 5.7's runtime installed.
    let root = FakeRoot::new("nvidia");
    root.kernel("6.18.44")
        .file(
            "/proc/driver/nvidia/gpus/0000:19:00.0/information",
            "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 17\n",
        )
        .file("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5", "")
        .file("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5.7.31921", "");
    let d = diagnose(&root, &[], ALL);
    assert_eq!(ids(&d), ["rocm-too-old", "no-amd-gpu"]);
    assert!(
        d.findings[0].message.contains("libamdhip64.so.5"),
        "{}",
        d.findings[0].message
    );
    assert!(
        d.findings[1].advice.contains("NVIDIA H100 80GB HBM3"),
        "{}",
        d.findings[1].advice
    );
    // A ROCm 6 library beside it is enough.
    root.file("/usr/lib/x86_64-linux-gnu/libamdhip64.so.6", "");
    assert_eq!(ids(&diagnose(&root, &[], ALL)), ["no-amd-gpu"]);
}

#[test]
fn missing_code_object_is_flagged() {
    let root = rx7900xtx("no-co", "6.18.0", 0, "0x00000080");
    let d = diagnose(&root, &[], &["gfx1151", "gfx1030"]);
    assert_eq!(d.system.gpus[0].code_object, Some(false));
    assert_eq!(ids(&d), ["no-code-object"]);
    assert!(d.findings[0]
        .advice
        .contains("ROCMFORGE_GPU_TARGETS=gfx1100"));
    let d = diagnose(&root, &[], &["gfx1100:xnack-"]);
    assert!(d.findings.is_empty(), "{:?}", ids(&d));
}

#[test]
fn gfx_override_on_a_supported_gpu_is_flagged() {
    let root = rx7900xtx("override", "6.18.0", 0, "0x00000080");
    let d = diagnose(&root, &[("HSA_OVERRIDE_GFX_VERSION", "10.3.0")], ALL);
    assert_eq!(ids(&d), ["hsa-override-gfx-version"]);
    assert!(d.findings[0].message.contains("gfx1030"));
    let d = diagnose(&root, &[("HSA_OVERRIDE_GFX_VERSION", "11.0.0")], ALL);
    assert!(d.findings.is_empty(), "{:?}", ids(&d));
    // An override that names a built target makes an unbuilt GPU runnable.
    let d = diagnose(
        &root,
        &[("HSA_OVERRIDE_GFX_VERSION", "10.3.0")],
        &["gfx1030"],
    );
    assert!(d.findings.is_empty(), "{:?}", ids(&d));
}

#[test]
fn visible_devices_hiding_every_gpu_are_flagged() {
    let root = rx7900xtx("visible", "6.18.0", 0, "0x00000080");
    for (var, value) in [
        ("HIP_VISIBLE_DEVICES", "1"),
        ("ROCR_VISIBLE_DEVICES", ""),
        ("CUDA_VISIBLE_DEVICES", "-1"),
    ] {
        let d = diagnose(&root, &[(var, value)], ALL);
        assert_eq!(ids(&d), ["visible-devices-hide-all"], "{var}={value:?}");
        assert!(d.findings[0].message.starts_with(var));
    }
    let d = diagnose(&root, &[("HIP_VISIBLE_DEVICES", "0")], ALL);
    assert!(d.findings.is_empty(), "{:?}", ids(&d));
}

#[test]
fn device_node_problems_are_flagged() {
    let root = rx7900xtx("nodes", "6.18.0", 0, "0x00000080");
    fs::remove_file(root.dir.join("dev/kfd")).unwrap();
    fs::remove_file(root.dir.join("dev/dri/renderD129")).unwrap();
    let d = diagnose(&root, &[], ALL);
    assert_eq!(ids(&d), ["render-node-unusable", "kfd-missing"]);
    assert!(d.findings[0].message.contains("/dev/dri/renderD129"));

    // Permissions cannot be denied to the root user that may run this
    // test, so the check is fed a system that says so.
    root.file("/dev/kfd", "").file("/dev/dri/renderD129", "");
    let mut system = diagnose(&root, &[], ALL).system;
    assert_eq!(system.device_nodes.kfd.read_write, Some(true));
    system.device_nodes.kfd.read_write = Some(false);
    system.device_nodes.render[0].read_write = Some(false);
    let found: Vec<&str> = known_issues::check(&system).iter().map(|f| f.id).collect();
    assert_eq!(found, ["render-node-unusable", "kfd-permissions"]);
}

#[test]
fn missing_runtimes_are_flagged() {
    let root = FakeRoot::new("no-runtimes");
    root.gpu(0, "0000:03:00.0", 1, 110000, 24 * GIB, 31 * GIB)
        .kernel("6.18.0");
    let d = diagnose(&root, &[], ALL);
    assert_eq!(ids(&d), ["vulkan-no-amd-driver", "rocm-not-found"]);
    // ROCM_PATH moves where ROCm is looked for.
    root.file("/usr/local/rocm-6.4/.info/version", "6.4.4-120")
        .radv();
    let d = diagnose(&root, &[("ROCM_PATH", "/usr/local/rocm-6.4")], ALL);
    assert!(d.findings.is_empty(), "{:?}", ids(&d));
    assert_eq!(d.system.rocm.version.as_deref(), Some("6.4.4-120"));
    let radv = &d.system.vulkan_drivers[0];
    assert_eq!(radv.api_version.as_deref(), Some("1.3.296"));
}

#[test]
fn kfd_nodes_join_cards_by_pci_location() {
    // KFD numbers the dGPU first; the cards are the other way round.
    let root = FakeRoot::new("two-gpus");
    root.gpu(0, "0000:c5:00.0", 2, 110501, GIB / 2, 64 * GIB)
        .gpu(1, "0000:03:00.0", 1, 110000, 24 * GIB, 31 * GIB)
        .kernel("6.18.0");
    let d = diagnose(&root, &[], ALL);
    let gfx: Vec<_> = d.system.gpus.iter().map(|g| g.gfx.as_deref()).collect();
    assert_eq!(gfx, [Some("gfx1151"), Some("gfx1100")]);
    assert_eq!(d.system.gpus[0].kfd_node.as_deref(), Some("2"));
}

#[test]
fn json_has_every_section() {
    let root = rx7900xtx("json", "6.8.0", 1, "0x00000083");
    let d = diagnose(&root, &[("HSA_ENABLE_SDMA", "0")], ALL);
    let v: serde_json::Value = serde_json::from_str(&report::json(&d)).unwrap();
    for key in [
        "gpus",
        "rocm",
        "vulkan_drivers",
        "kernel",
        "firmware",
        "settings",
        "environment",
        "build",
        "findings",
    ] {
        assert!(v.get(key).is_some(), "missing {key}: {v}");
    }
    assert_eq!(v["gpus"][0]["gfx"], "gfx1100");
    assert_eq!(v["firmware"][0]["mes"], "0x00000083");
    assert_eq!(v["environment"]["HSA_ENABLE_SDMA"], "0");
    assert_eq!(
        v["environment"]["HIP_VISIBLE_DEVICES"],
        serde_json::Value::Null
    );
    assert_eq!(v["settings"]["cwsr"]["module_parameter"], 1);
    let f = &v["findings"][0];
    for key in ["id", "severity", "message", "advice", "source"] {
        assert!(f[key].is_string(), "finding lacks {key}: {f}");
    }
    assert_eq!(f["severity"], "error");
}

/// The binary with none of the variables doctor reads, so the tester's
/// shell cannot change the outcome.
fn doctor_cmd(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rocmforge"));
    cmd.arg("doctor").args(args);
    for var in system::ENV_VARS {
        cmd.env_remove(var);
    }
    cmd
}

fn has_amd_gpu_here() -> bool {
    fs::read_dir("/sys/class/drm")
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            fs::read_to_string(e.path().join("device/vendor")).is_ok_and(|v| v.trim() == "0x1002")
        })
}

#[test]
fn cli_on_this_machine_exits_0() {
    let o = doctor_cmd(&[]).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("\nFindings:\n"), "{out}");
    for section in [
        "GPUs",
        "ROCm",
        "Vulkan drivers",
        "Kernel & firmware",
        "Settings",
        "This build",
    ] {
        assert!(
            out.contains(&format!("\n{section}\n")),
            "no {section}: {out}"
        );
    }
    if !has_amd_gpu_here() {
        assert!(out.contains("no AMD GPU found"), "{out}");
    }
}

#[test]
fn cli_json_on_a_fake_root() {
    let root = strix_halo("cli-json");
    let dir = root.dir.to_str().unwrap();
    let o = doctor_cmd(&["--json", "--sysroot", dir]).output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["gpus"][0]["gfx"], "gfx1151");
    assert_eq!(v["findings"][0]["id"], "strix-sdma-stall");
    assert_eq!(v["sysroot"], dir);
    // The environment is the real one: set on the child here.
    let o = doctor_cmd(&["--json", "--sysroot", dir])
        .env("HSA_ENABLE_SDMA", "0")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["findings"], serde_json::json!([]));
}

#[test]
fn cli_unreadable_sysroot_is_one_error_line() {
    let o = doctor_cmd(&["--sysroot", "/nonexistent/rocmforge-root"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: cannot read the system root"),
        "{err}"
    );
}

#[test]
fn cli_survives_a_closed_pipe() {
    let mut child = doctor_cmd(&[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn device_nodes_are_checked_without_opening_them() {
    // Opening a FIFO blocks until a writer comes: if doctor opened /dev/kfd
    // instead of asking the kernel for permission, it would not return.
    let root = rx7900xtx("fifo", "6.18.0", 0, "0x00000080");
    let kfd = root.dir.join("dev/kfd");
    fs::remove_file(&kfd).unwrap();
    let made = Command::new("mkfifo").arg(&kfd).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo failed");
    let sysroot = root.open();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let d = doctor::diagnose(&sysroot, &Environment::new(), &built(ALL));
        let _ = tx.send(d.system.device_nodes.kfd.clone());
    });
    let kfd_node = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("doctor blocked on /dev/kfd");
    assert!(kfd_node.present);
    assert_eq!(kfd_node.read_write, Some(true));
}
