//! Cases 1 to 3: memory. Device and pinned host alloc+free cache hits against the driver's
//! allocation calls, and the lock table's pinned lookup against cuPointerGetAttribute.

use super::*;

/// Case 1: device memory cache hit against the warm driver pool and cuMemAlloc/cuMemFree.
pub(super) fn device_alloc_free(bench: &Bench<'_>, report: &mut Report) -> Outcome<()> {
    let (rt, driver, plan) = (bench.rt, bench.driver, bench.plan);
    let stream = RawStream::new(driver)?;
    let ordinal = result::device::get(driver, 0)?;
    let pool = result::device::default_memory_pool(driver, ordinal)?;
    // SAFETY: device 0's default pool, which lives as long as its context.
    unsafe { result::memory::set_pool_release_threshold(driver, pool, u64::MAX) }?;
    let before = bench.allocator_stats(MemoryKind::Device);
    for size in [256, 64 * KIB, MIB] {
        let [ours, pool] = plan.interleaved(
            51,
            1000,
            [
                &mut whole(|calls| {
                    for _ in 0..calls {
                        let buffer = rt.alloc(D0, MemoryKind::Device, black_box(size))?;
                        rt.free(black_box(buffer))?;
                    }
                    Ok(())
                }),
                &mut whole(|calls| {
                    for _ in 0..calls {
                        // SAFETY: a live stream of the current context.
                        let address = unsafe {
                            result::memory::alloc_async(driver, black_box(size), stream.raw)
                        }?;
                        // SAFETY: the allocation just made, unused, freed in the same order.
                        unsafe {
                            result::memory::free_async(driver, black_box(address), stream.raw)
                        }?;
                    }
                    stream.synchronize()
                }),
            ],
        )?;
        // Not interleaved: cuMemAlloc + cuMemFree costs ~1,000 times a hit, far beyond any
        // drift, and the row has no target.
        let plain = plan.median_per_call(15, 40, |calls| {
            for _ in 0..calls {
                let address = result::memory::alloc(driver, black_box(size))?;
                // SAFETY: the allocation just made, unused by any work.
                unsafe { result::memory::free(driver, black_box(address)) }?;
            }
            Ok(())
        })?;
        let label = format!("alloc + free, device, {} (cache hit)", size_text(size));
        report.row(
            "1",
            label.clone(),
            ours,
            "cuMemAllocAsync + cuMemFreeAsync, warm default pool (threshold max), sync per batch",
            pool,
            None,
            Target::FasterBy(10.0),
        );
        report.row(
            "1",
            label,
            ours,
            "cuMemAlloc + cuMemFree",
            plain,
            None,
            Target::None,
        );
    }
    let after = bench.allocator_stats(MemoryKind::Device);
    report.notes.push(format!(
        "case 1: the runtime's device requests during case 1: {} hits, {} misses, {} driver calls \
         (a miss is a first request, in a warm-up batch)",
        after.hits - before.hits,
        after.misses - before.misses,
        after.driver_calls - before.driver_calls,
    ));
    Ok(())
}

/// Case 2: pinned host memory cache hit against cuMemHostAlloc/cuMemFreeHost.
pub(super) fn host_pinned_alloc_free(bench: &Bench<'_>, report: &mut Report) -> Outcome<()> {
    let (rt, driver, plan) = (bench.rt, bench.driver, bench.plan);
    // The flags the backend uses when the runtime's cache misses.
    let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
    let before = bench.allocator_stats(MemoryKind::HostPinned);
    for size in [256, 64 * KIB, MIB] {
        let ours = plan.median_per_call(51, 2000, |calls| {
            for _ in 0..calls {
                let buffer = rt.alloc(D0, MemoryKind::HostPinned, black_box(size))?;
                rt.free(black_box(buffer))?;
            }
            Ok(())
        })?;
        // Not interleaved: a cuMemHostAlloc + cuMemFreeHost pair takes ~10,000 times a hit (it
        // maps and unmaps pages), far beyond any drift, so few and short batches suffice there
        // while the hit needs long ones; the row has no target.
        let driver_ns = plan.median_per_call(7, 10, |calls| {
            for _ in 0..calls {
                let address = result::memory::alloc_host(driver, black_box(size), flags)?;
                // SAFETY: the allocation just made, unused by any work.
                unsafe { result::memory::free_host(driver, black_box(address)) }?;
            }
            Ok(())
        })?;
        report.row(
            "2",
            format!("alloc + free, pinned host, {} (cache hit)", size_text(size)),
            ours,
            "cuMemHostAlloc(PORTABLE | DEVICEMAP) + cuMemFreeHost",
            driver_ns,
            None,
            Target::None,
        );
    }
    let after = bench.allocator_stats(MemoryKind::HostPinned);
    report.notes.push(format!(
        "case 2: the runtime's pinned host requests during case 2: {} hits, {} misses, {} driver \
         calls",
        after.hits - before.hits,
        after.misses - before.misses,
        after.driver_calls - before.driver_calls,
    ));
    Ok(())
}

/// Ranges locked through `Runtime::lock_range`, unlocked on drop (before their memory goes).
pub(super) struct LockedRanges<'a> {
    rt: &'a Runtime<CudaBackend>,
    starts: Vec<usize>,
}

impl Drop for LockedRanges<'_> {
    fn drop(&mut self) {
        for &start in &self.starts {
            let _ = self.rt.unlock_range(start);
        }
    }
}

/// A small deterministic generator (xorshift64*) for query addresses.
pub(super) struct Xorshift(u64);

impl Xorshift {
    fn below(&mut self, bound: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as usize % bound
    }
}

/// Case 3: "is this range pinned, and where?" with 4,096 locked regions.
pub(super) fn pinned_lookup(bench: &Bench<'_>, report: &mut Report) -> Outcome<()> {
    let (rt, driver, plan) = (bench.rt, bench.driver, bench.plan);
    let regions = plan.pick(4096, 64);
    // 32 KiB regions 64 KiB apart, from a 64 KiB-aligned start: disjoint and page-aligned with
    // 4 KiB and with 64 KiB pages, no two regions sharing a page.
    const REGION: usize = 32 * KIB;
    const STRIDE: usize = 64 * KIB;
    const QUERY_LEN: usize = 64;
    let backing = vec![1u8; regions * STRIDE + STRIDE];
    let base = (backing.as_ptr() as usize).next_multiple_of(STRIDE);
    let pins_before = rt.stats().locks.driver_pins;
    let start = Instant::now();
    let mut locked = LockedRanges {
        rt,
        starts: Vec::with_capacity(regions),
    };
    for index in 0..regions {
        let region = base + index * STRIDE;
        rt.lock_range(region, REGION)?;
        locked.starts.push(region);
    }
    let lock_time = start.elapsed();
    let mut random = Xorshift(0x9e37_79b9_7f4a_7c15);
    let queries: Vec<usize> = (0..4096)
        .map(|_| base + random.below(regions) * STRIDE + random.below(REGION - QUERY_LEN))
        .collect();
    // Both sides must give the same answer before either is timed.
    for &query in queries.iter().take(64) {
        let ours = rt.pinned_address(query, QUERY_LEN, D0)?;
        let theirs = result::memory::device_pointer_of(driver, query as sys::CUdeviceptr)?;
        if ours != Some(theirs as usize) {
            return Err(format!(
                "pinned_address({query:#x}) = {ours:x?}, the driver's device pointer {theirs:#x}"
            )
            .into());
        }
    }
    // One cursor per side, so each side walks the same addresses in the same order.
    let mut next = [0usize; 3];
    let query = |next: &mut usize| {
        let query = queries[*next % queries.len()];
        *next += 1;
        black_box(query)
    };
    let [ours_next, device_pointer_next, memory_type_next] = &mut next;
    let driver_lookup = |attribute: sys::CUpointer_attribute, query: usize| -> Outcome<()> {
        let query = query as sys::CUdeviceptr;
        match attribute {
            sys::CU_POINTER_ATTRIBUTE_DEVICE_POINTER => {
                black_box(result::memory::device_pointer_of(driver, query)?);
            }
            _ => {
                black_box(result::memory::memory_type_of(driver, query)?);
            }
        }
        Ok(())
    };
    let [ours, device_pointer, memory_type] = plan.interleaved(
        31,
        queries.len(),
        [
            &mut whole(|calls| {
                for _ in 0..calls {
                    black_box(rt.pinned_address(query(ours_next), QUERY_LEN, D0)?);
                }
                Ok(())
            }),
            &mut whole(|calls| {
                for _ in 0..calls {
                    driver_lookup(
                        sys::CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
                        query(device_pointer_next),
                    )?;
                }
                Ok(())
            }),
            &mut whole(|calls| {
                for _ in 0..calls {
                    driver_lookup(
                        sys::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                        query(memory_type_next),
                    )?;
                }
                Ok(())
            }),
        ],
    )?;
    let label = format!("pinned_address(ptr, 64, device 0), {regions} locked regions, random ptr");
    for (name, driver_ns) in [
        ("DEVICE_POINTER", device_pointer),
        ("MEMORY_TYPE", memory_type),
    ] {
        report.row(
            "3",
            label.clone(),
            ours,
            format!("cuPointerGetAttribute({name}), same registered regions and addresses"),
            driver_ns,
            None,
            Target::FasterBy(4.0),
        );
    }
    report.notes.push(format!(
        "case 3: locking {regions} regions of {} took {:.0} ms ({} driver pins)",
        size_text(REGION),
        lock_time.as_secs_f64() * 1e3,
        rt.stats().locks.driver_pins - pins_before,
    ));
    drop(locked);
    drop(backing);
    Ok(())
}
