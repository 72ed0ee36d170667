//! Every call of the table on a real GPU, through the public API. Ignored by
//! default (CI and our machines have no GPU); run on a GPU machine with
//!
//!     cargo test -p hip-sys --test gpu -- --ignored --nocapture
//!
//! `ROCMFORGE_HIP_RUNTIME` picks the runtime as in the backend. The kernel
//! and fault checks need a code object, so they run in CUDA-driver mode only
//! (a hand-written PTX kernel); HIP kernels are the backend's to test.

use std::ffi::{c_void, CStr};
use std::time::{Duration, Instant};

use hip_sys::{DevicePtr, Event, EventStatus, Flavor, HipError, Runtime, Stream};

/// `data[i] += 1` for `i < n`, and a kernel that traps.
const PTX: &str = r#"
.version 7.0
.target sm_52
.address_size 64

.visible .entry add_one(.param .u64 p_data, .param .u32 p_n)
{
    .reg .pred %p;
    .reg .b32 %r<7>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [p_data];
    ld.param.u32 %r1, [p_n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p, %r5, %r1;
    @%p bra DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.u32 %r6, [%rd4];
    add.u32 %r6, %r6, 1;
    st.global.u32 [%rd4], %r6;
DONE:
    ret;
}

.visible .entry fault()
{
    trap;
}
"#;

/// Polls `event` until ready or 10 s pass, as the backend's bounded waits do.
fn wait(rt: &Runtime, event: Event) -> Result<(), HipError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // SAFETY: `event` is live for the whole test.
        match unsafe { rt.event_query(event) }? {
            EventStatus::Ready => return Ok(()),
            EventStatus::NotReady if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_micros(50))
            }
            EventStatus::NotReady => panic!("GPU work did not finish in 10 s"),
        }
    }
}

fn sync(rt: &Runtime, event: Event, stream: Stream) -> Result<(), HipError> {
    // SAFETY: live event and stream.
    unsafe { rt.event_record(event, stream) }?;
    wait(rt, event)
}

#[test]
#[ignore = "needs a GPU with ROCm 6+ or the CUDA driver"]
fn every_call_on_a_real_gpu() -> Result<(), HipError> {
    let rt = Runtime::from_env()?;
    println!(
        "{} from {}: runtime {}, driver {}",
        rt.flavor(),
        rt.library_path(),
        rt.runtime_version()?,
        rt.driver_version()?
    );
    assert!(rt.device_count()? > 0);
    let props = rt.device_properties(0)?;
    println!("{props:?}");
    assert!(props.total_mem > 0 && props.compute_units > 0 && props.warp_size >= 32);
    assert!(!props.name.is_empty() && !props.arch_name().is_empty());
    assert_eq!(
        rt.hip_device_properties(0)?.is_some(),
        rt.flavor() == Flavor::Hip
    );
    let bad = rt.device_properties(1000).unwrap_err();
    println!("device 1000: {bad}");

    rt.set_device(0)?;
    rt.set_device(0)?; // a second call reuses the retained context
    let mem = rt.mem_get_info()?;
    assert!(mem.free > 0 && mem.free <= mem.total);

    const N: usize = 1024;
    let bytes = N * 4;
    let stream = rt.stream_create()?;
    let event = rt.event_create()?;
    let host = rt.host_malloc(2 * bytes)?;
    let dev = rt.malloc(bytes)?;
    assert_eq!(rt.allocation_calls(), 2);
    let oom = rt.malloc(1 << 50).unwrap_err();
    assert!(matches!(oom, HipError::OutOfMemory { .. }), "{oom:?}");
    assert_eq!(rt.allocation_calls(), 3, "failed calls count too");

    // SAFETY: `host` holds 2 * N u32, pinned, used only by this test.
    let (src, dst) = unsafe {
        let all = std::slice::from_raw_parts_mut(host.cast::<u32>(), 2 * N);
        all.split_at_mut(N)
    };
    for (i, v) in src.iter_mut().enumerate() {
        *v = i as u32;
    }

    // Copies and memset, waited for with events.
    // SAFETY: ranges inside the allocations; each copy is waited for before
    // the host memory is touched again.
    unsafe {
        rt.memcpy_htod_async(dev, src.as_ptr().cast(), bytes, stream)?;
        rt.memset_async(dev.offset(4), 0xff, 4, stream)?;
        rt.memcpy_dtoh_async(dst.as_mut_ptr().cast(), dev, bytes, stream)?;
    }
    sync(&rt, event, stream)?;
    assert_eq!(dst[0], 0);
    assert_eq!(dst[1], u32::MAX);
    assert_eq!(dst[2..], src[2..]);

    // A captured graph: memset then copy back, replayed twice.
    // SAFETY: capture and end on this thread; the graph's ranges are live
    // until it is destroyed below.
    unsafe {
        rt.stream_begin_capture(stream)?;
        rt.memset_async(dev, 7, bytes, stream)?;
        rt.memcpy_dtoh_async(dst.as_mut_ptr().cast(), dev, bytes, stream)?;
        let graph = rt.stream_end_capture(stream)?;
        let exec = rt.graph_instantiate(graph)?;
        rt.graph_destroy(graph)?;
        dst.fill(0);
        rt.graph_launch(exec, stream)?;
        sync(&rt, event, stream)?;
        assert!(dst.iter().all(|&v| v == 0x0707_0707));
        dst.fill(0);
        rt.graph_launch(exec, stream)?;
        sync(&rt, event, stream)?;
        assert!(dst.iter().all(|&v| v == 0x0707_0707));
        rt.graph_exec_destroy(exec)?;
    }

    if rt.flavor() == Flavor::CudaDriver {
        // SAFETY: a complete PTX module.
        let module = unsafe { rt.module_load_data(PTX.as_bytes()) }?;
        // SAFETY: `module` is live.
        let add_one = unsafe { rt.module_get_function(module, c"add_one") }?;
        // SAFETY: as above.
        let missing = unsafe { rt.module_get_function(module, c"no_such_kernel") }.unwrap_err();
        println!("missing kernel: {missing}");
        let mut ptr: DevicePtr = dev;
        let mut n = N as u32;
        let mut params = [
            (&mut ptr as *mut DevicePtr).cast::<c_void>(),
            (&mut n as *mut u32).cast::<c_void>(),
        ];
        // SAFETY: two parameters matching (u64, u32); `dev` holds N u32.
        unsafe {
            rt.memcpy_htod_async(dev, src.as_ptr().cast(), bytes, stream)?;
            rt.launch_kernel(add_one, [4, 1, 1], [256, 1, 1], 0, stream, &mut params)?;
            rt.memcpy_dtoh_async(dst.as_mut_ptr().cast(), dev, bytes, stream)?;
        }
        sync(&rt, event, stream)?;
        assert!(dst.iter().zip(src.iter()).all(|(d, s)| *d == s + 1));
        // SAFETY: the launch finished; `add_one` is not used again.
        unsafe { rt.module_unload(module) }?;
    }

    // SAFETY: all work finished above; nothing is used afterwards.
    unsafe {
        rt.stream_synchronize(stream)?;
        rt.free(dev)?;
        rt.host_free(host)?;
        rt.event_destroy(event)?;
        rt.stream_destroy(stream)?;
    }

    if rt.flavor() == Flavor::CudaDriver {
        // A faulting kernel is a DeviceLost, seen by the event poll. The
        // context is dead afterwards, so this comes last.
        let stream = rt.stream_create()?;
        let event = rt.event_create()?;
        // SAFETY: a complete PTX module.
        let module = unsafe { rt.module_load_data(PTX.as_bytes()) }?;
        let name: &CStr = c"fault";
        // SAFETY: `module` is live.
        let fault = unsafe { rt.module_get_function(module, name) }?;
        // SAFETY: `fault` takes no parameters.
        unsafe { rt.launch_kernel(fault, [1, 1, 1], [1, 1, 1], 0, stream, &mut []) }?;
        let lost = sync(&rt, event, stream).unwrap_err();
        println!("fault: {lost}");
        assert!(matches!(lost, HipError::DeviceLost { .. }), "{lost:?}");
        let after = rt.malloc(16).unwrap_err();
        println!("after the fault: {after}");
    }

    // SAFETY: nothing created on device 0 is used afterwards.
    let released = unsafe { rt.release_device(0) };
    println!("release_device: {released:?}");
    Ok(())
}
