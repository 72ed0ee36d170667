//! The kernels' module: loaded once per backend, functions looked up by
//! name the first time a graph needs them (at `prepare`, never per step)
//! and cached. A name the module lacks is one error naming the kernel and
//! the target, so a kernel not yet ported reads as exactly that.

use std::collections::HashMap;
use std::ffi::CString;

use hip_sys::{Function, HipError, Module, Runtime};
use rocmforge_core::backend::BackendError;

use crate::error::Hip;

pub(crate) struct Kernels {
    module: Module,
    /// The target the module was built for, for messages.
    target: String,
    functions: HashMap<String, Function>,
}

impl Kernels {
    /// Loads `image` (the device's code object or PTX) on the current
    /// device.
    pub fn load(rt: &Runtime, image: &'static [u8], target: &str) -> Result<Kernels, BackendError> {
        // SAFETY: `image` is one of build.rs's embedded outputs for this
        // flavor, chosen by `Device::open`: a complete AMDGPU code object
        // for HIP, NUL-terminated PTX for the CUDA driver.
        let module = unsafe { rt.module_load_data(image) }.map_err(Hip)?;
        Ok(Kernels {
            module,
            target: target.to_string(),
            functions: HashMap::new(),
        })
    }

    /// The function `name`, looked up on first use.
    pub fn get(&mut self, rt: &Runtime, name: &str) -> Result<Function, BackendError> {
        if let Some(&f) = self.functions.get(name) {
            return Ok(f);
        }
        let missing = |why: String| {
            BackendError::missing_kernel(
                name,
                format!("not in the HIP kernels built for {} ({why})", self.target),
            )
        };
        let c_name = CString::new(name).map_err(|_| missing("a NUL in the name".into()))?;
        // SAFETY: the module is live until `unload`, which takes the
        // backend down with it.
        match unsafe { rt.module_get_function(self.module, &c_name) } {
            Ok(f) => {
                self.functions.insert(name.to_string(), f);
                Ok(f)
            }
            // "named symbol not found" and friends: the kernel is not there.
            Err(e @ HipError::Call { .. }) => Err(missing(e.to_string())),
            Err(e) => Err(Hip(e).into()),
        }
    }

    /// Unloads the module.
    ///
    /// # Safety
    ///
    /// No queued launch or instantiated graph uses its functions, and
    /// none is used afterwards.
    pub unsafe fn unload(&mut self, rt: &Runtime) -> Result<(), BackendError> {
        self.functions.clear();
        // SAFETY: the caller's contract.
        unsafe { rt.module_unload(self.module) }.map_err(Hip)?;
        Ok(())
    }
}
