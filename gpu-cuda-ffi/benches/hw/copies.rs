//! Case 6: copies. Copies from and to locked memory against raw async copies, and pageable
//! copies through the runtime's staging against the driver's own pageable copies.

use super::*;

/// The driver's own synchronous pageable copies, which the bindings do not include: looked up
/// through cuGetProcAddress with the ABI of `cuMemcpyHtoD_v2` / `cuMemcpyDtoH_v2` (CUDA 3.2).
pub(super) struct PageableCopies {
    host_to_device: unsafe extern "C" fn(sys::CUdeviceptr, *const c_void, usize) -> sys::CUresult,
    device_to_host: unsafe extern "C" fn(*mut c_void, sys::CUdeviceptr, usize) -> sys::CUresult,
}

impl PageableCopies {
    fn find(driver: &Driver) -> Outcome<Self> {
        let get_proc_address = driver.cuGetProcAddress()?;
        let lookup = |name: &std::ffi::CStr| -> Outcome<*mut c_void> {
            let mut address = ptr::null_mut();
            let mut status = sys::CU_GET_PROC_ADDRESS_SUCCESS;
            // SAFETY: `name` is NUL-terminated and both out-parameters are valid for writes.
            check("cuGetProcAddress", unsafe {
                get_proc_address(
                    name.as_ptr(),
                    &mut address,
                    3020,
                    sys::CU_GET_PROC_ADDRESS_LEGACY_STREAM as sys::cuuint64_t,
                    &mut status,
                )
            })?;
            if address.is_null() || status != sys::CU_GET_PROC_ADDRESS_SUCCESS {
                return Err(format!("the driver has no {name:?} with the ABI of CUDA 3.2").into());
            }
            Ok(address)
        };
        let host_to_device = lookup(c"cuMemcpyHtoD")?;
        let device_to_host = lookup(c"cuMemcpyDtoH")?;
        // SAFETY: the driver returned these for cuMemcpyHtoD / cuMemcpyDtoH at the ABI of CUDA
        // 3.2, whose signatures (cuda.h: cuMemcpyHtoD_v2, cuMemcpyDtoH_v2) these types spell.
        unsafe {
            Ok(Self {
                host_to_device: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(sys::CUdeviceptr, *const c_void, usize) -> sys::CUresult,
                >(host_to_device),
                device_to_host: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(*mut c_void, sys::CUdeviceptr, usize) -> sys::CUresult,
                >(device_to_host),
            })
        }
    }

    /// cuMemcpyHtoD: copies `bytes` of host memory to device memory, synchronously.
    ///
    /// # Safety
    /// `[src, src + bytes)` is valid for reads and `[dst, dst + bytes)` device memory valid
    /// for writes, and nothing else uses the destination meanwhile.
    unsafe fn host_to_device(
        &self,
        dst: sys::CUdeviceptr,
        src: *const c_void,
        bytes: usize,
    ) -> Result<(), Error> {
        // SAFETY: the caller's promise for both ranges.
        check("cuMemcpyHtoD", unsafe {
            (self.host_to_device)(dst, src, bytes)
        })
    }

    /// cuMemcpyDtoH: copies `bytes` of device memory to host memory, synchronously.
    ///
    /// # Safety
    /// As [`PageableCopies::host_to_device`], the other way.
    unsafe fn device_to_host(
        &self,
        dst: *mut c_void,
        src: sys::CUdeviceptr,
        bytes: usize,
    ) -> Result<(), Error> {
        // SAFETY: the caller's promise for both ranges.
        check("cuMemcpyDtoH", unsafe {
            (self.device_to_host)(dst, src, bytes)
        })
    }
}

/// Case 6: 256 MiB copies, locked and pageable, both directions.
pub(super) fn copies(bench: &Bench<'_>, report: &mut Report) -> Outcome<()> {
    let (rt, driver, plan) = (bench.rt, bench.driver, bench.plan);
    let pageable_copies = PageableCopies::find(driver)?;
    let bytes = plan.pick(256 * MIB, 8 * MIB);
    let stream = RawStream::new(driver)?;
    let device = rt.alloc(D0, MemoryKind::Device, bytes)?;
    let device_address = device.address() as sys::CUdeviceptr;

    // Locked: the runtime's copy of a LockedHost span against raw async copies of the same
    // (registered) memory on a kept stream, each followed by its synchronisation.
    // Not interleaved (nor the pageable copies below): each call moves 256 MiB over the bus
    // for milliseconds, bound by the link, not by clocks or driver state, and the sides
    // already agree within 1% when measured one after the other. The pageable rows compare
    // several staging sizes, each with a runtime of its own, against one driver figure.
    let mut locked_memory = vec![1u8; bytes];
    {
        let locked = rt.lock_host(&mut locked_memory)?;
        let host = locked.span(0, bytes)?.address();
        let ours_h2d = plan.median_per_call(11, 1, |calls| {
            for _ in 0..calls {
                let token = rt.copy(D0, device.all(), locked.span(0, bytes)?, &mut Vec::new())?;
                rt.wait(token)?;
            }
            Ok(())
        })?;
        let raw_h2d = plan.median_per_call(11, 1, |calls| {
            for _ in 0..calls {
                // SAFETY: the locked span and the device buffer, both `bytes` long and live; the
                // copy is synchronised before either is touched.
                unsafe {
                    result::memory::copy_host_to_device_async(
                        driver,
                        device_address,
                        host as *const c_void,
                        bytes,
                        stream.raw,
                    )
                }?;
                stream.synchronize()?;
            }
            Ok(())
        })?;
        let ours_d2h = plan.median_per_call(11, 1, |calls| {
            for _ in 0..calls {
                let token = rt.copy(D0, locked.span(0, bytes)?, device.all(), &mut Vec::new())?;
                rt.wait(token)?;
            }
            Ok(())
        })?;
        let raw_d2h = plan.median_per_call(11, 1, |calls| {
            for _ in 0..calls {
                // SAFETY: as for the upload above.
                unsafe {
                    result::memory::copy_device_to_host_async(
                        driver,
                        host as *mut c_void,
                        device_address,
                        bytes,
                        stream.raw,
                    )
                }?;
                stream.synchronize()?;
            }
            Ok(())
        })?;
        let size = size_text(bytes);
        report.row(
            "6",
            format!("H2D {size}, copy from lock_host memory + wait"),
            ours_h2d,
            "cuMemcpyHtoDAsync + cuStreamSynchronize, same registered memory",
            raw_h2d,
            Some(bytes),
            Target::WithinPercent(5.0),
        );
        report.row(
            "6",
            format!("D2H {size}, copy to lock_host memory + wait"),
            ours_d2h,
            "cuMemcpyDtoHAsync + cuStreamSynchronize, same registered memory",
            raw_d2h,
            Some(bytes),
            Target::WithinPercent(5.0),
        );
        locked.unlock()?;
    }
    drop(locked_memory);

    // Pageable: the driver's own synchronous copies, then the runtime's staged upload and
    // download with each staging chunk size (a runtime of its own per size, sharing the
    // backend).
    let mut pageable = vec![3u8; bytes];
    let driver_h2d = plan.median_per_call(7, 1, |calls| {
        for _ in 0..calls {
            // SAFETY: the pageable vector and the device buffer, both `bytes` long and live.
            unsafe {
                pageable_copies.host_to_device(device_address, pageable.as_ptr().cast(), bytes)
            }?;
        }
        Ok(())
    })?;
    let driver_d2h = plan.median_per_call(7, 1, |calls| {
        for _ in 0..calls {
            // SAFETY: as for the upload above.
            unsafe {
                pageable_copies.device_to_host(pageable.as_mut_ptr().cast(), device_address, bytes)
            }?;
        }
        Ok(())
    })?;
    rt.free(device)?;
    for chunk in plan.pick(
        vec![2 * MIB, 4 * MIB, 8 * MIB, 16 * MIB, 32 * MIB],
        vec![4 * MIB],
    ) {
        let staged = Runtime::shared(
            Arc::clone(bench.backend),
            RuntimeConfig {
                staging_chunk: chunk,
                ..RuntimeConfig::default()
            },
        )?;
        let device = staged.alloc(D0, MemoryKind::Device, bytes)?;
        let ours_h2d = plan.median_per_call(7, 1, |calls| {
            for _ in 0..calls {
                let token = staged.upload(D0, device.all(), &pageable, &mut Vec::new())?;
                staged.wait(token)?;
            }
            Ok(())
        })?;
        let ours_d2h = plan.median_per_call(7, 1, |calls| {
            for _ in 0..calls {
                staged.download(D0, &mut pageable, device.all(), &mut Vec::new())?;
            }
            Ok(())
        })?;
        let (size, staging) = (size_text(bytes), size_text(chunk));
        report.row(
            "6",
            format!("H2D {size} pageable, upload + wait, staging chunk {staging}"),
            ours_h2d,
            "cuMemcpyHtoD, same pageable memory",
            driver_h2d,
            Some(bytes),
            Target::Faster,
        );
        report.row(
            "6",
            format!("D2H {size} pageable, download, staging chunk {staging}"),
            ours_d2h,
            "cuMemcpyDtoH, same pageable memory",
            driver_d2h,
            Some(bytes),
            Target::Faster,
        );
        staged.free(device)?;
        let shutdown = staged.shutdown()?;
        if !shutdown.program.unwaited.is_empty() {
            report.notes.push(format!(
                "case 6: staging {staging}: {} tokens ended unwaited",
                shutdown.program.unwaited.len()
            ));
        }
    }
    Ok(())
}
