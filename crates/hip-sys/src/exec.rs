//! Streams, modules, kernel launches, events and captured graphs: the
//! calls that queue and observe work.

use std::ffi::{c_void, CStr};
use std::ptr::null_mut;

use crate::cuda;
use crate::error::HipError;
use crate::hip;
use crate::runtime::{Api, Runtime};
use crate::types::{Event, EventStatus, Function, Graph, GraphExec, Module, Stream};

impl Runtime {
    /// Creates a non-blocking stream on the current device
    /// (`hipStreamCreateWithFlags(hipStreamNonBlocking)` /
    /// `cuStreamCreate(CU_STREAM_NON_BLOCKING)`).
    pub fn stream_create(&self) -> Result<Stream, HipError> {
        let mut s = null_mut();
        match self.api {
            Api::Hip(h) => {
                // SAFETY: writes one handle through a valid pointer.
                let status =
                    unsafe { (h.stream_create_with_flags)(&mut s, hip::STREAM_NON_BLOCKING) };
                h.check("hipStreamCreateWithFlags", status)?;
            }
            Api::Cuda(c) => {
                // SAFETY: writes one handle through a valid pointer.
                let status = unsafe { (c.stream_create)(&mut s, cuda::STREAM_NON_BLOCKING) };
                c.check("cuStreamCreate", status)?;
            }
        }
        Ok(Stream(s))
    }

    /// Destroys a stream (`hipStreamDestroy` / `cuStreamDestroy_v2`); work
    /// already queued still runs.
    ///
    /// # Safety
    ///
    /// `stream` is a live stream of this runtime, not capturing, and not
    /// used afterwards.
    pub unsafe fn stream_destroy(&self, stream: Stream) -> Result<(), HipError> {
        match self.api {
            Api::Hip(h) => {
                // SAFETY: the caller's contract.
                let status = unsafe { (h.stream_destroy)(stream.0) };
                h.check("hipStreamDestroy", status)
            }
            Api::Cuda(c) => {
                // SAFETY: the caller's contract.
                let status = unsafe { (c.stream_destroy)(stream.0) };
                c.check("cuStreamDestroy_v2", status)
            }
        }
    }

    /// Blocks until `stream` is idle (`hipStreamSynchronize` /
    /// `cuStreamSynchronize`). This wait has no deadline, and KFD queues no
    /// kernel-side timeout: use it only at teardown, on a stream known not
    /// to be hung. Bounded waits poll [`event_query`](Runtime::event_query).
    ///
    /// # Safety
    ///
    /// `stream` is a live stream of this runtime.
    pub unsafe fn stream_synchronize(&self, stream: Stream) -> Result<(), HipError> {
        match self.api {
            Api::Hip(h) => {
                // SAFETY: the caller's contract.
                let status = unsafe { (h.stream_synchronize)(stream.0) };
                h.check("hipStreamSynchronize", status)
            }
            Api::Cuda(c) => {
                // SAFETY: the caller's contract.
                let status = unsafe { (c.stream_synchronize)(stream.0) };
                c.check("cuStreamSynchronize", status)
            }
        }
    }

    /// Loads a code object on the current device (`hipModuleLoadData` /
    /// `cuModuleLoadData`). In CUDA mode PTX text without a trailing NUL is
    /// given one.
    ///
    /// # Safety
    ///
    /// `image` is a complete, well-formed code object for this flavor: HIP,
    /// an AMDGPU code object (ELF) or clang offload bundle; CUDA, a cubin,
    /// fatbin or PTX. The runtime takes sizes from the image's own headers,
    /// so a truncated or corrupt image can be read past its end.
    pub unsafe fn module_load_data(&self, image: &[u8]) -> Result<Module, HipError> {
        let mut m = null_mut();
        match self.api {
            Api::Hip(h) => {
                // SAFETY: the caller's contract; `image` outlives the call,
                // and the runtime copies what it keeps.
                let status = unsafe { (h.module_load_data)(&mut m, image.as_ptr().cast()) };
                h.check("hipModuleLoadData", status)?;
            }
            Api::Cuda(c) => {
                let image = cuda::nul_terminated_image(image);
                // SAFETY: the caller's contract, and PTX now ends in a NUL;
                // the driver copies what it keeps.
                let status = unsafe { (c.module_load_data)(&mut m, image.as_ptr().cast()) };
                c.check("cuModuleLoadData", status)?;
            }
        }
        Ok(Module(m))
    }

    /// Unloads a module (`hipModuleUnload` / `cuModuleUnload`).
    ///
    /// # Safety
    ///
    /// `module` is a live module of this runtime; neither it nor any of its
    /// functions is used afterwards, and no queued or recorded launch of
    /// them is pending.
    pub unsafe fn module_unload(&self, module: Module) -> Result<(), HipError> {
        match self.api {
            Api::Hip(h) => {
                // SAFETY: the caller's contract.
                let status = unsafe { (h.module_unload)(module.0) };
                h.check("hipModuleUnload", status)
            }
            Api::Cuda(c) => {
                // SAFETY: the caller's contract.
                let status = unsafe { (c.module_unload)(module.0) };
                c.check("cuModuleUnload", status)
            }
        }
    }

    /// Looks up a kernel by its symbol name (`hipModuleGetFunction` /
    /// `cuModuleGetFunction`). Kernels declared `extern "C"` keep their
    /// source name.
    ///
    /// # Safety
    ///
    /// `module` is a live module of this runtime. The function is valid
    /// only as long as the module.
    pub unsafe fn module_get_function(
        &self,
        module: Module,
        name: &CStr,
    ) -> Result<Function, HipError> {
        let mut f = null_mut();
        match self.api {
            Api::Hip(h) => {
                // SAFETY: the caller's contract; `name` is NUL-terminated.
                let status = unsafe { (h.module_get_function)(&mut f, module.0, name.as_ptr()) };
                h.check("hipModuleGetFunction", status)?;
            }
            Api::Cuda(c) => {
                // SAFETY: the caller's contract; `name` is NUL-terminated.
                let status = unsafe { (c.module_get_function)(&mut f, module.0, name.as_ptr()) };
                c.check("cuModuleGetFunction", status)?;
            }
        }
        Ok(Function(f))
    }

    /// Queues a kernel launch on `stream` (`hipModuleLaunchKernel` /
    /// `cuLaunchKernel`): `grid` blocks of `block` threads, with
    /// `shared_bytes` of dynamic shared memory. `params[i]` points to the
    /// value of the kernel's i-th argument (for a pointer argument, to a
    /// [`DevicePtr`](crate::DevicePtr)); the values are copied at the call.
    ///
    /// # Safety
    ///
    /// - `function` is a live function of this runtime.
    /// - `params` has exactly one entry per kernel argument, each pointing
    ///   to a readable value of that argument's type and size (the runtime
    ///   cannot check either).
    /// - Every device address the kernel will touch lies within live
    ///   allocations until the launch completes, and the kernel's accesses
    ///   stay within them.
    /// - `stream` is a live stream of this runtime.
    pub unsafe fn launch_kernel(
        &self,
        function: Function,
        grid: [u32; 3],
        block: [u32; 3],
        shared_bytes: u32,
        stream: Stream,
        params: &mut [*mut c_void],
    ) -> Result<(), HipError> {
        let params = if params.is_empty() {
            null_mut()
        } else {
            params.as_mut_ptr()
        };
        let [gx, gy, gz] = grid;
        let [bx, by, bz] = block;
        match self.api {
            Api::Hip(h) => {
                // SAFETY: the caller's contract; `extra` is null, as
                // `params` carries the arguments.
                let status = unsafe {
                    (h.module_launch_kernel)(
                        function.0,
                        gx,
                        gy,
                        gz,
                        bx,
                        by,
                        bz,
                        shared_bytes,
                        stream.0,
                        params,
                        null_mut(),
                    )
                };
                h.check("hipModuleLaunchKernel", status)
            }
            Api::Cuda(c) => {
                // SAFETY: as above.
                let status = unsafe {
                    (c.launch_kernel)(
                        function.0,
                        gx,
                        gy,
                        gz,
                        bx,
                        by,
                        bz,
                        shared_bytes,
                        stream.0,
                        params,
                        null_mut(),
                    )
                };
                c.check("cuLaunchKernel", status)
            }
        }
    }

    /// Creates an event without timing, the cheapest kind to poll
    /// (`hipEventCreateWithFlags(hipEventDisableTiming)` /
    /// `cuEventCreate(CU_EVENT_DISABLE_TIMING)`).
    pub fn event_create(&self) -> Result<Event, HipError> {
        let mut e = null_mut();
        match self.api {
            Api::Hip(h) => {
                // SAFETY: writes one handle through a valid pointer.
                let status =
                    unsafe { (h.event_create_with_flags)(&mut e, hip::EVENT_DISABLE_TIMING) };
                h.check("hipEventCreateWithFlags", status)?;
            }
            Api::Cuda(c) => {
                // SAFETY: writes one handle through a valid pointer.
                let status = unsafe { (c.event_create)(&mut e, cuda::EVENT_DISABLE_TIMING) };
                c.check("cuEventCreate", status)?;
            }
        }
        Ok(Event(e))
    }

    /// Records `event` after the work queued so far on `stream`
    /// (`hipEventRecord` / `cuEventRecord`).
    ///
    /// # Safety
    ///
    /// `event` and `stream` are live objects of this runtime.
    pub unsafe fn event_record(&self, event: Event, stream: Stream) -> Result<(), HipError> {
        match self.api {
            Api::Hip(h) => {
                // SAFETY: the caller's contract.
                let status = unsafe { (h.event_record)(event.0, stream.0) };
                h.check("hipEventRecord", status)
            }
            Api::Cuda(c) => {
                // SAFETY: the caller's contract.
                let status = unsafe { (c.event_record)(event.0, stream.0) };
                c.check("cuEventRecord", status)
            }
        }
    }

    /// Whether the work before `event`'s last record has finished, without
    /// blocking (`hipEventQuery` / `cuEventQuery`): the building block of
    /// bounded waits. A kernel fault shows up here as
    /// [`HipError::DeviceLost`].
    ///
    /// # Safety
    ///
    /// `event` is a live event of this runtime.
    pub unsafe fn event_query(&self, event: Event) -> Result<EventStatus, HipError> {
        match self.api {
            Api::Hip(h) => {
                // SAFETY: the caller's contract.
                let status = unsafe { (h.event_query)(event.0) };
                if status == hip::ERROR_NOT_READY {
                    return Ok(EventStatus::NotReady);
                }
                h.check("hipEventQuery", status)?;
            }
            Api::Cuda(c) => {
                // SAFETY: the caller's contract.
                let status = unsafe { (c.event_query)(event.0) };
                if status == cuda::ERROR_NOT_READY {
                    return Ok(EventStatus::NotReady);
                }
                c.check("cuEventQuery", status)?;
            }
        }
        Ok(EventStatus::Ready)
    }

    /// Destroys an event (`hipEventDestroy` / `cuEventDestroy_v2`).
    ///
    /// # Safety
    ///
    /// `event` is a live event of this runtime and not used afterwards.
    pub unsafe fn event_destroy(&self, event: Event) -> Result<(), HipError> {
        match self.api {
            Api::Hip(h) => {
                // SAFETY: the caller's contract.
                let status = unsafe { (h.event_destroy)(event.0) };
                h.check("hipEventDestroy", status)
            }
            Api::Cuda(c) => {
                // SAFETY: the caller's contract.
                let status = unsafe { (c.event_destroy)(event.0) };
                c.check("cuEventDestroy_v2", status)
            }
        }
    }

    /// Starts capturing the work queued on `stream` into a graph instead of
    /// running it (`hipStreamBeginCapture` / `cuStreamBeginCapture_v2`), in
    /// thread-local mode: only this thread's capture-unsafe calls (such as
    /// allocations) are refused meanwhile, so other threads using the GPU,
    /// parallel tests among them, are not disturbed.
    ///
    /// # Safety
    ///
    /// `stream` is a live, non-capturing stream of this runtime, and
    /// [`stream_end_capture`](Runtime::stream_end_capture) is called on the
    /// same thread.
    pub unsafe fn stream_begin_capture(&self, stream: Stream) -> Result<(), HipError> {
        match self.api {
            Api::Hip(h) => {
                // SAFETY: the caller's contract; the mode is a valid enum value.
                let status =
                    unsafe { (h.stream_begin_capture)(stream.0, hip::CAPTURE_MODE_THREAD_LOCAL) };
                h.check("hipStreamBeginCapture", status)
            }
            Api::Cuda(c) => {
                // SAFETY: as above.
                let status =
                    unsafe { (c.stream_begin_capture)(stream.0, cuda::CAPTURE_MODE_THREAD_LOCAL) };
                c.check("cuStreamBeginCapture_v2", status)
            }
        }
    }

    /// Ends a capture and returns the graph (`hipStreamEndCapture` /
    /// `cuStreamEndCapture`).
    ///
    /// # Safety
    ///
    /// `stream` is a live stream of this runtime capturing since a
    /// [`stream_begin_capture`](Runtime::stream_begin_capture) on this thread.
    pub unsafe fn stream_end_capture(&self, stream: Stream) -> Result<Graph, HipError> {
        let mut g = null_mut();
        match self.api {
            Api::Hip(h) => {
                // SAFETY: the caller's contract; writes one handle.
                let status = unsafe { (h.stream_end_capture)(stream.0, &mut g) };
                h.check("hipStreamEndCapture", status)?;
            }
            Api::Cuda(c) => {
                // SAFETY: the caller's contract; writes one handle.
                let status = unsafe { (c.stream_end_capture)(stream.0, &mut g) };
                c.check("cuStreamEndCapture", status)?;
            }
        }
        Ok(Graph(g))
    }

    /// Instantiates a graph for launching (`hipGraphInstantiate` /
    /// `cuGraphInstantiateWithFlags` with no flags).
    ///
    /// # Safety
    ///
    /// `graph` is a live graph of this runtime. The executable graph keeps
    /// the device addresses and kernel arguments captured in it: they must
    /// stay valid for as long as it is launched.
    pub unsafe fn graph_instantiate(&self, graph: Graph) -> Result<GraphExec, HipError> {
        let mut x = null_mut();
        match self.api {
            Api::Hip(h) => {
                // SAFETY: the caller's contract; no error node or log buffer.
                let status =
                    unsafe { (h.graph_instantiate)(&mut x, graph.0, null_mut(), null_mut(), 0) };
                h.check("hipGraphInstantiate", status)?;
            }
            Api::Cuda(c) => {
                // SAFETY: the caller's contract; flags 0.
                let status = unsafe { (c.graph_instantiate_with_flags)(&mut x, graph.0, 0) };
                c.check("cuGraphInstantiateWithFlags", status)?;
            }
        }
        Ok(GraphExec(x))
    }

    /// Queues one run of an executable graph on `stream` (`hipGraphLaunch`
    /// / `cuGraphLaunch`).
    ///
    /// # Safety
    ///
    /// `exec` and `stream` are live objects of this runtime, and everything
    /// the graph's kernels and copies touch is valid until the run completes.
    pub unsafe fn graph_launch(&self, exec: GraphExec, stream: Stream) -> Result<(), HipError> {
        match self.api {
            Api::Hip(h) => {
                // SAFETY: the caller's contract.
                let status = unsafe { (h.graph_launch)(exec.0, stream.0) };
                h.check("hipGraphLaunch", status)
            }
            Api::Cuda(c) => {
                // SAFETY: the caller's contract.
                let status = unsafe { (c.graph_launch)(exec.0, stream.0) };
                c.check("cuGraphLaunch", status)
            }
        }
    }

    /// Destroys an executable graph (`hipGraphExecDestroy` /
    /// `cuGraphExecDestroy`).
    ///
    /// # Safety
    ///
    /// `exec` is a live executable graph of this runtime, not used
    /// afterwards, with no launch of it pending.
    pub unsafe fn graph_exec_destroy(&self, exec: GraphExec) -> Result<(), HipError> {
        match self.api {
            Api::Hip(h) => {
                // SAFETY: the caller's contract.
                let status = unsafe { (h.graph_exec_destroy)(exec.0) };
                h.check("hipGraphExecDestroy", status)
            }
            Api::Cuda(c) => {
                // SAFETY: the caller's contract.
                let status = unsafe { (c.graph_exec_destroy)(exec.0) };
                c.check("cuGraphExecDestroy", status)
            }
        }
    }

    /// Destroys a graph (`hipGraphDestroy` / `cuGraphDestroy`); executable
    /// graphs instantiated from it are unaffected.
    ///
    /// # Safety
    ///
    /// `graph` is a live graph of this runtime and not used afterwards.
    pub unsafe fn graph_destroy(&self, graph: Graph) -> Result<(), HipError> {
        match self.api {
            Api::Hip(h) => {
                // SAFETY: the caller's contract.
                let status = unsafe { (h.graph_destroy)(graph.0) };
                h.check("hipGraphDestroy", status)
            }
            Api::Cuda(c) => {
                // SAFETY: the caller's contract.
                let status = unsafe { (c.graph_destroy)(graph.0) };
                c.check("cuGraphDestroy", status)
            }
        }
    }
}
