//! The kernel policies the GPU backends share: the library's functions looked up with the
//! module unloaded on a failure, kernel names, packed launch and graph node arguments,
//! workgroup bytes.

use alloc::format;
use alloc::vec;
use alloc::vec::Vec;
use core::ffi::{CStr, c_int};

use crate::backend::KernelArg;
use crate::backend::library::{ArgBuffer, ArgList, LIBRARY};
use crate::error::{Error, Result};

/// Every function of the kernel library ([`LIBRARY`], in table order) from `module`, just
/// loaded: `function` looks one up by symbol. If a lookup fails, the module is unloaded
/// (`unload`, which cannot fail: look its entry point up before loading) and the lookup's error
/// returned.
pub fn library_functions<M: Copy, F>(
    module: M,
    mut function: impl FnMut(M, &CStr) -> Result<F>,
    unload: impl FnOnce(M),
) -> Result<Vec<F>> {
    let mut functions = Vec::with_capacity(LIBRARY.len());
    for entry in LIBRARY {
        match function(module, entry.symbol) {
            Ok(found) => functions.push(found),
            Err(error) => {
                unload(module);
                return Err(error);
            }
        }
    }
    Ok(functions)
}

/// What errors call a kernel of a program's own module
/// ([`Backend::module_kernel`](crate::backend::Backend::module_kernel)), whose name the backend
/// does not keep.
pub const MODULE_KERNEL: &str = "(a kernel of a loaded module)";

/// A kernel's name for errors: the library's name at `library_index`, or [`MODULE_KERNEL`].
pub fn kernel_name(library_index: Option<usize>) -> &'static str {
    library_index.map_or(MODULE_KERNEL, |index| LIBRARY[index].name)
}

/// The argument values of a [`Backend::launch`](crate::backend::Backend::launch) of the library
/// kernel at `library_index`, checked against its parameters ([`Error::KernelArgumentMismatch`]); a
/// module's kernel (`None`) has no table to check against and is refused the same way, naming
/// [`Backend::launch_packed`](crate::backend::Backend::launch_packed).
pub fn library_arguments(library_index: Option<usize>, args: &[KernelArg]) -> Result<ArgBuffer> {
    let Some(index) = library_index else {
        return Err(Error::KernelArgumentMismatch {
            kernel: MODULE_KERNEL,
            expected: "the module's own parameter array (launch_packed)",
        });
    };
    ArgBuffer::pack(&LIBRARY[index], args)
}

/// The argument values of a graph's launch node: a library kernel's checked against its
/// parameters as [`library_arguments`] checks them; a module's kernel's packed as given, any
/// number (the caller of the unsafe launch promised the kernel's parameters have the values'
/// types, as for a graph the values are copied once, when the node is built or updated).
pub fn node_arguments(library_index: Option<usize>, args: &[KernelArg]) -> Result<ArgList> {
    if let Some(index) = library_index {
        LIBRARY[index].check_arguments(args)?;
    }
    Ok(ArgList::pack(args))
}

/// `bytes` of dynamic workgroup memory as the drivers' attribute value (a C `int`), or
/// [`Error::LimitExceeded`] naming the kernel where it does not fit.
pub fn workgroup_bytes_attribute(bytes: u32, library_index: Option<usize>) -> Result<c_int> {
    c_int::try_from(bytes).map_err(|_| Error::LimitExceeded {
        what: "dynamic workgroup memory per workgroup",
        required: bytes as usize,
        limit: c_int::MAX as usize,
        detail: vec![format!("kernel {}", kernel_name(library_index))],
    })
}
