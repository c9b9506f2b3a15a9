//! The registry of live handles, the allocation and registration records, and the shared
//! memory and kernel policies, each against the rules of the module documentation.

use alloc::vec;
use alloc::vec::Vec;
use core::cell::Cell;
use core::ffi::c_int;

use super::*;
use crate::allocator::{AllocatorCapabilities, KindSupport, MemoryKind};
use crate::backend::library::LIBRARY;
use crate::backend::{DeviceInfo, KernelArg};
use crate::error::{ByteRange, DriverError, Error, Result};
use crate::id::DeviceId;
use crate::workgroup::WorkgroupLimits;

const D0: DeviceId = DeviceId(0);
const D1: DeviceId = DeviceId(1);

fn stale<V>(what: &'static str, key: HandleKey<V>) -> Error {
    Error::StaleHandle {
        backend: "test",
        what,
        id: key.id(),
    }
}

#[test]
fn a_live_handle_is_found_and_a_destroyed_or_unknown_one_is_stale() {
    let streams = LiveHandles::new("test", "stream");
    let (a, b) = (streams.insert(D0, 10u32), streams.insert(D1, 20u32));
    assert_eq!(*streams.get(a).unwrap(), 10);
    assert_eq!(*streams.get(b).unwrap(), 20);
    let destroyed = Cell::new(None);
    streams
        .destroy(
            a,
            || {},
            |&raw| {
                destroyed.set(Some(raw));
                Ok(())
            },
        )
        .unwrap();
    assert_eq!(destroyed.get(), Some(10));
    assert_eq!(streams.get(a).unwrap_err(), stale("stream", a));
    assert_eq!(
        streams.destroy(a, || {}, |_| unreachable!()),
        Err(stale("stream", a)),
        "destroyed twice"
    );
    // The slot serves the next handle, under a new generation: the old key stays stale.
    let c = streams.insert(D0, 30u32);
    assert_ne!(c, a);
    assert_ne!(c.id(), a.id());
    assert_eq!(streams.get(a).unwrap_err(), stale("stream", a));
    assert_eq!(streams.get_as(a, "kernel").unwrap_err(), stale("kernel", a));
    assert_eq!(*streams.get(c).unwrap(), 30);
    assert_eq!(streams.len(), 2);
}

#[test]
fn a_registered_handle_carries_its_own_key() {
    /// A handle, as a backend's carry their keys.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    struct Stream(HandleKey<Stream>);
    let streams = LiveHandles::new("test", "stream");
    let (one, two) = (streams.register(D0, Stream), streams.register(D1, Stream));
    assert_ne!(one, two);
    assert_ne!(one.0.id(), two.0.id());
    assert_eq!(
        (*streams.get(one.0).unwrap(), *streams.get(two.0).unwrap()),
        (one, two)
    );
    assert_eq!(streams.forget_device(D1), 1);
}

#[test]
fn another_registrys_handle_is_stale() {
    let (ours, theirs) = (
        LiveHandles::new("test", "event"),
        LiveHandles::new("test", "event"),
    );
    let (mine, foreign) = (ours.insert(D0, 1u16), theirs.insert(D0, 2u16));
    assert_eq!(ours.get(foreign).unwrap_err(), stale("event", foreign));
    assert_eq!(
        ours.destroy(foreign, || {}, |_| unreachable!()),
        Err(stale("event", foreign))
    );
    assert!(!ours.contains(foreign) && theirs.contains(foreign));
    assert_eq!(*theirs.get(foreign).unwrap(), 2);
    assert_eq!(*ours.get(mine).unwrap(), 1);
}

#[test]
fn a_failed_destroy_puts_the_handle_back() {
    let events = LiveHandles::new("test", "event");
    let key = events.insert(D0, 'e');
    let failure = Error::NullPointer { what: "driver" };
    assert_eq!(
        events.destroy(key, || {}, |_| Err(failure.clone())),
        Err(failure)
    );
    assert_eq!(*events.get(key).unwrap(), 'e');
    assert_eq!(events.len(), 1);
}

#[test]
fn destroy_waits_for_the_calls_holding_the_handle() {
    let streams = LiveHandles::new("test", "stream");
    let key = streams.insert(D0, 1u8);
    let held = Cell::new(Some(streams.get(key).unwrap()));
    let looks = Cell::new(0);
    // The "call in flight" ends at the third look; meanwhile the handle is stale already.
    let relax = || {
        looks.set(looks.get() + 1);
        assert!(!streams.contains(key));
        if looks.get() == 3 {
            held.take();
        }
    };
    assert_eq!(streams.remove(key, relax), Ok((D0, 1)));
    assert_eq!(looks.get(), 3);
    assert!(!streams.contains(key));
}

#[test]
fn a_reset_forgets_the_devices_handles_only() {
    let modules = LiveHandles::new("test", "module");
    let keys: Vec<HandleKey<usize>> = (0..4)
        .map(|index| modules.insert(DeviceId(index as u32 % 2), index))
        .collect();
    let in_flight = modules.get(keys[0]).unwrap();
    assert_eq!(modules.forget_device(D0), 2);
    assert_eq!(*in_flight, 0, "a call in flight keeps its value");
    assert!(modules.get(keys[0]).is_err() && modules.get(keys[2]).is_err());
    assert!(modules.get(keys[1]).is_ok() && modules.get(keys[3]).is_ok());
    // The forgotten slot whose call is still in flight is not reused until the call returns.
    let fresh = modules.insert(D0, 4);
    assert_eq!(*in_flight, 0);
    assert!(keys.iter().all(|key| key.id() != fresh.id()));
    drop(in_flight);
    assert_eq!(modules.forget_device(D0), 1);
    assert_eq!(modules.len(), 2);
}

/// What became of each handle the threaded tests make, by its token: made and live, destroyed
/// by the "driver", or dropped.
mod fate {
    use std::sync::atomic::{AtomicU8, Ordering};
    use std::vec::Vec;

    pub(super) const UNBORN: u8 = 0;
    pub(super) const LIVE: u8 = 1;
    pub(super) const DESTROYED: u8 = 2;
    pub(super) const DROPPED: u8 = 3;

    /// A handle's value: its token, and the table of fates its drop writes to.
    #[derive(Debug)]
    pub(super) struct Tracked {
        pub(super) token: usize,
        pub(super) fates: &'static [AtomicU8],
    }

    pub(super) fn table(tokens: usize) -> &'static [AtomicU8] {
        std::boxed::Box::leak((0..tokens).map(|_| AtomicU8::new(UNBORN)).collect())
    }

    impl Tracked {
        pub(super) fn fate(&self) -> u8 {
            self.fates[self.token].load(Ordering::SeqCst)
        }

        /// The driver's destroy: once only, and only of a live handle.
        pub(super) fn destroy(&self) {
            let was = self.fates[self.token].swap(DESTROYED, Ordering::SeqCst);
            assert_eq!(was, LIVE, "handle {} destroyed twice", self.token);
        }
    }

    impl Drop for Tracked {
        fn drop(&mut self) {
            let was = self.fates[self.token].swap(DROPPED, Ordering::SeqCst);
            assert!(
                was == LIVE || was == DESTROYED,
                "handle {} dropped twice",
                self.token
            );
        }
    }

    pub(super) fn count(fates: &[AtomicU8], fate: u8) -> usize {
        fates
            .iter()
            .filter(|of| of.load(Ordering::SeqCst) == fate)
            .count()
    }

    /// A small xorshift generator, one per thread.
    pub(super) struct Rng(pub(super) u64);

    impl Rng {
        pub(super) fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    /// Busy for a moment, as a driver call would be.
    pub(super) fn call(rng: &mut Rng) {
        for _ in 0..rng.below(64) {
            core::hint::spin_loop();
        }
        if rng.below(2) == 0 {
            std::thread::yield_now();
        }
    }

    pub(super) fn keep_last<T>(list: &mut Vec<T>, item: T, most: usize) {
        if list.len() == most {
            list.remove(0);
        }
        list.push(item);
    }
}

#[test]
fn threads_checking_destroying_and_creating_never_use_a_destroyed_handle_nor_lose_one() {
    use fate::{DESTROYED, DROPPED, LIVE, Rng, Tracked};
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const PLACES: usize = 4;
    const THREADS: usize = 4;
    // Under Miri, which checks every access and emulates weak memory, a few hundred do.
    const ROUNDS: usize = if cfg!(miri) { 300 } else { 20_000 };
    let fates = fate::table(PLACES + THREADS * ROUNDS);
    let started = std::sync::Barrier::new(THREADS);
    let tokens = AtomicUsize::new(0);
    let handles = LiveHandles::new("test", "stream");
    let make = |device: DeviceId| {
        let token = tokens.fetch_add(1, Ordering::SeqCst);
        fates[token].store(LIVE, Ordering::SeqCst);
        (handles.insert(device, Tracked { token, fates }), token)
    };
    // A few handles every thread uses (key and token), replaced as they are destroyed.
    type Place = Mutex<Option<(HandleKey<Tracked>, usize)>>;
    let places: Vec<Place> = (0..PLACES)
        .map(|index| Mutex::new(Some(make(DeviceId(index as u32 % 2)))))
        .collect();
    let failure = Error::NullPointer { what: "driver" };
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (places, handles, failure, make) = (&places, &handles, &failure, &make);
            let started = &started;
            scope.spawn(move || {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (thread as u64 + 1) << 17);
                let mut dead = Vec::new();
                started.wait();
                for _ in 0..ROUNDS {
                    let place = &places[rng.below(PLACES)];
                    match rng.below(8) {
                        // A call: the handle is its own, live for the whole hold, or stale.
                        0..=4 => {
                            let Some((key, token)) = *place.lock().unwrap() else {
                                continue;
                            };
                            if let Ok(live) = handles.get(key) {
                                assert_eq!(live.token, token, "another handle's value");
                                assert_eq!(live.fate(), LIVE, "used after its destroy");
                                fate::call(&mut rng);
                                assert_eq!(live.fate(), LIVE, "destroyed mid-call");
                            }
                        }
                        // A destroy (sometimes refused by the driver first, sometimes a
                        // removal), and a new handle in its place.
                        5 | 6 => {
                            let Some((key, token)) = place.lock().unwrap().take() else {
                                continue;
                            };
                            if rng.below(4) == 0 {
                                let refused = handles
                                    .destroy(key, std::thread::yield_now, |_| Err(failure.clone()));
                                assert_eq!(refused, Err(failure.clone()));
                                assert!(handles.contains(key), "a refused destroy lost it");
                            }
                            if rng.below(4) == 0 {
                                let (_, value) =
                                    handles.remove(key, std::thread::yield_now).unwrap();
                                assert_eq!(value.token, token);
                                value.destroy();
                            } else {
                                handles
                                    .destroy(key, std::thread::yield_now, |value| {
                                        assert_eq!(value.token, token);
                                        value.destroy();
                                        Ok(())
                                    })
                                    .unwrap();
                            }
                            assert!(fates[token].load(Ordering::SeqCst) >= DESTROYED);
                            fate::keep_last(&mut dead, key, 64);
                            *place.lock().unwrap() = Some(make(DeviceId(rng.below(2) as u32)));
                        }
                        // Keys of destroyed handles stay stale while their slots serve others.
                        _ => {
                            for &key in &dead {
                                assert_eq!(handles.get(key).unwrap_err(), stale("stream", key));
                                assert!(handles.destroy(key, || {}, |_| unreachable!()).is_err());
                            }
                        }
                    }
                }
            });
        }
    });
    let made = tokens.load(Ordering::SeqCst);
    assert_eq!(handles.len(), PLACES);
    for place in &places {
        let (key, token) = place.lock().unwrap().unwrap();
        assert_eq!(handles.get(key).unwrap().token, token);
    }
    assert_eq!(fate::count(&fates[..made], LIVE), PLACES, "a handle lost");
    assert_eq!(fate::count(&fates[..made], DROPPED), made - PLACES);
    drop(handles);
    assert_eq!(fate::count(&fates[..made], DROPPED), made);
}

#[test]
fn a_reset_under_calls_in_flight_drops_nothing_they_hold() {
    use fate::{DROPPED, LIVE, Rng, Tracked};
    use std::sync::Barrier;
    use std::sync::atomic::Ordering;

    const THREADS: usize = 4;
    let fates = fate::table(4);
    let modules = LiveHandles::new("test", "module");
    let keys: Vec<_> = (0..4)
        .map(|token| {
            fates[token].store(LIVE, Ordering::SeqCst);
            modules.insert(DeviceId(token as u32 % 2), Tracked { token, fates })
        })
        .collect();
    let started = Barrier::new(THREADS + 1);
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (modules, keys, started) = (&modules, &keys, &started);
            scope.spawn(move || {
                let mut rng = Rng(0x2545_F491_4F6C_DD1D ^ (thread as u64 + 1) << 9);
                let key = keys[thread % 2 * 2];
                let mut checks = 0;
                // Calls on a handle of device 0 until the reset makes it stale.
                while let Ok(live) = modules.get(key) {
                    checks += 1;
                    if checks == 1 {
                        started.wait();
                    }
                    assert_eq!(live.fate(), LIVE, "dropped under a call");
                    fate::call(&mut rng);
                    assert_eq!(live.fate(), LIVE, "dropped mid-call");
                }
                assert!(checks > 0);
            });
        }
        started.wait();
        assert_eq!(modules.forget_device(D0), 2);
    });
    assert!(modules.get(keys[0]).is_err() && modules.get(keys[2]).is_err());
    // The calls have returned: the next sweep drops the forgotten values.
    assert_eq!(modules.forget_device(D0), 0);
    assert_eq!(fate::count(fates, DROPPED), 2);
    assert_eq!(fates[1].load(Ordering::SeqCst), LIVE);
    assert_eq!(fates[3].load(Ordering::SeqCst), LIVE);
    drop(modules);
    assert_eq!(fate::count(fates, DROPPED), 4);
}

#[test]
fn only_live_allocations_of_the_kind_and_device_are_freed() {
    let allocations = LiveAllocations::new();
    let kind = MemoryKind::Device;
    assert_eq!(
        allocations.record(D0, kind, Ok(Some(0x1000))),
        Ok(Some(0x1000))
    );
    assert_eq!(allocations.record(D0, kind, Ok(None)), Ok(None));
    let failed = Err(Error::NullPointer { what: "x" });
    assert_eq!(allocations.record(D0, kind, failed.clone()), failed);
    assert_eq!(allocations.len(), 1);
    let never = |_| -> Result<()> { panic!("the driver was asked") };
    let unknown = |device, address| Err(Error::UnknownAddress { device, address });
    assert_eq!(
        allocations.release(D0, kind, 0x2000, || never(())),
        unknown(D0, 0x2000)
    );
    assert_eq!(
        allocations.release(D1, kind, 0x1000, || never(())),
        unknown(D1, 0x1000)
    );
    assert_eq!(
        allocations.release(D0, MemoryKind::HostPinned, 0x1000, || never(())),
        unknown(D0, 0x1000)
    );
    assert_eq!(
        allocations.release(D0, kind, 0, || never(())),
        Err(Error::NullPointer {
            what: "freed address"
        })
    );
    // A failed free leaves the memory live; a good one frees it once.
    let failure = Error::ZeroSize { what: "driver" };
    assert_eq!(
        allocations.release(D0, kind, 0x1000, || Err(failure.clone())),
        Err(failure)
    );
    assert!(allocations.contains(D0, kind, 0x1000));
    assert_eq!(allocations.release(D0, kind, 0x1000, || Ok(())), Ok(()));
    assert_eq!(
        allocations.release(D0, kind, 0x1000, || never(())),
        unknown(D0, 0x1000)
    );
    assert!(allocations.is_empty());
    for (device, address) in [(D0, 0x10), (D1, 0x20), (D0, 0x30)] {
        allocations.record(device, kind, Ok(Some(address))).unwrap();
    }
    assert_eq!(allocations.forget_device(D0), 2);
    assert!(allocations.contains(D1, kind, 0x20));
}

#[test]
fn only_registered_starts_are_unregistered() {
    let registrations = LiveRegistrations::new();
    let range = ByteRange::new(0x1000, 0x100).unwrap();
    registrations.record(range);
    let never = || -> Result<()> { panic!("the driver was asked") };
    assert_eq!(
        registrations.release(0x1080, never),
        Err(Error::NotEntryStart {
            ptr: 0x1080,
            entry: range
        })
    );
    assert_eq!(
        registrations.release(0x1100, never),
        Err(Error::NotLocked { ptr: 0x1100 })
    );
    assert_eq!(
        registrations.release(0x800, never),
        Err(Error::NotLocked { ptr: 0x800 })
    );
    let failure = Error::ZeroSize { what: "driver" };
    assert_eq!(
        registrations.release(0x1000, || Err(failure.clone())),
        Err(failure)
    );
    assert_eq!(registrations.get(0x1000), Some(range));
    assert_eq!(registrations.release(0x1000, || Ok(())), Ok(()));
    assert_eq!(
        registrations.release(0x1000, never),
        Err(Error::NotLocked { ptr: 0x1000 })
    );
    assert!(registrations.is_empty());
}

fn device_info() -> DeviceInfo {
    DeviceInfo {
        name: "test".into(),
        total_memory: 1 << 30,
        allocator: AllocatorCapabilities {
            device: KindSupport::SYNCHRONOUS,
            managed: KindSupport::NONE,
            host_pinned: KindSupport::SYNCHRONOUS,
            host_register: true,
        },
        workgroup: WorkgroupLimits {
            default_per_block: 48 << 10,
            max_per_block_opt_in: 48 << 10,
            per_multiprocessor: 64 << 10,
            reserved_per_block: 0,
        },
        unified_addressing: true,
        pageable_memory_access: false,
    }
}

#[test]
fn allocations_of_missing_kinds_or_no_bytes_are_refused() {
    let info = device_info();
    assert_eq!(check_allocation(&info, D0, MemoryKind::Device, 64), Ok(()));
    assert_eq!(
        check_allocation(&info, D0, MemoryKind::Managed, 64),
        Err(Error::KindUnsupported {
            device: D0,
            kind: MemoryKind::Managed
        })
    );
    let zero = Err(Error::ZeroSize {
        what: "allocation size",
    });
    assert_eq!(check_allocation(&info, D0, MemoryKind::HostPinned, 0), zero);
    assert_eq!(
        check_stream_allocation(D1, MemoryKind::Device, true, 64),
        Ok(())
    );
    assert_eq!(
        check_stream_allocation(D1, MemoryKind::Device, true, 0),
        zero
    );
    for (kind, pool) in [(MemoryKind::Device, false), (MemoryKind::Managed, true)] {
        assert_eq!(
            check_stream_allocation(D1, kind, pool, 64),
            Err(Error::KindUnsupported { device: D1, kind })
        );
    }
}

fn driver_error(code: i64) -> Error {
    Error::Driver(DriverError {
        backend: "test",
        call: "alloc",
        name: "CODE",
        code,
    })
}

#[test]
fn the_answering_code_is_none_and_others_stay_errors() {
    assert_eq!(none_on_code(Ok(5), 2), Ok(Some(5)));
    assert_eq!(none_on_code::<u8>(Err(driver_error(2)), 2), Ok(None));
    assert_eq!(
        none_on_code::<u8>(Err(driver_error(1)), 2),
        Err(driver_error(1))
    );
    let other = Error::ZeroSize { what: "x" };
    assert_eq!(none_on_code::<u8>(Err(other.clone()), 2), Err(other));
}

#[test]
fn each_kind_is_freed_its_way() {
    use MemoryKind::*;
    assert_eq!(FreeStep::of(Device, Some(7)), FreeStep::InStreamOrder(7));
    assert_eq!(FreeStep::<u8>::of(Device, None), FreeStep::Now);
    assert_eq!(
        FreeStep::of(HostPinned, Some(7)),
        FreeStep::AfterSynchronizing {
            after: Some(7),
            pinned: true
        }
    );
    assert_eq!(
        FreeStep::<u8>::of(Managed, None),
        FreeStep::AfterSynchronizing {
            after: None,
            pinned: false
        }
    );
}

#[test]
fn peer_access_is_undone_only_where_this_call_enabled_it_and_the_pool_refused() {
    let undone = Cell::new(0);
    let undo = || undone.set(undone.get() + 1);
    let refused = || Some(Err(driver_error(1)));
    assert_eq!(enable_peer_access(|| Ok(true), || None, undo), Ok(()));
    assert_eq!(
        enable_peer_access(|| Ok(false), || Some(Ok(())), undo),
        Ok(())
    );
    assert_eq!(
        enable_peer_access(|| Ok(false), refused, undo),
        Err(driver_error(1))
    );
    assert_eq!(undone.get(), 0, "already enabled by someone else: left on");
    assert_eq!(
        enable_peer_access(|| Ok(true), refused, undo),
        Err(driver_error(1))
    );
    assert_eq!(undone.get(), 1);
    assert_eq!(
        enable_peer_access(|| Err(driver_error(3)), || unreachable!(), undo),
        Err(driver_error(3))
    );
    assert_eq!(undone.get(), 1);
}

#[test]
fn a_missing_library_function_unloads_the_module() {
    let unloaded = Cell::new(None);
    let all = library_functions(
        7u8,
        |_, symbol| Ok(symbol.to_bytes().len()),
        |m| unloaded.set(Some(m)),
    );
    assert_eq!(all.unwrap().len(), LIBRARY.len());
    assert_eq!(unloaded.get(), None);
    let missing = LIBRARY[1].symbol;
    let found = library_functions(
        7u8,
        |_, symbol| {
            if symbol == missing {
                Err(driver_error(500))
            } else {
                Ok(())
            }
        },
        |m| unloaded.set(Some(m)),
    );
    assert_eq!(found, Err(driver_error(500)));
    assert_eq!(unloaded.get(), Some(7));
}

#[test]
fn launch_arguments_are_checked_against_the_library_and_refused_for_modules() {
    let args = [KernelArg::Ptr(0x1000), KernelArg::U32(1), KernelArg::U64(1)];
    let fill = crate::backend::library::find_for("test", "fill_u32").unwrap();
    assert!(library_arguments(Some(fill), &args).is_ok());
    assert!(matches!(
        library_arguments(Some(fill), &args[..2]),
        Err(Error::KernelArgumentMismatch {
            kernel: "fill_u32",
            ..
        })
    ));
    assert!(matches!(
        library_arguments(None, &args),
        Err(Error::KernelArgumentMismatch {
            kernel: MODULE_KERNEL,
            expected: "the module's own parameter array (launch_packed)"
        })
    ));
    assert_eq!(kernel_name(Some(fill)), "fill_u32");
    assert_eq!(workgroup_bytes_attribute(4096, None), Ok(4096));
    assert_eq!(
        workgroup_bytes_attribute(u32::MAX, Some(fill)),
        Err(Error::LimitExceeded {
            what: "dynamic workgroup memory per workgroup",
            required: u32::MAX as usize,
            limit: c_int::MAX as usize,
            detail: vec!["kernel fill_u32".into()],
        })
    );
}

#[test]
fn graph_node_arguments_are_checked_for_the_library_and_taken_as_given_for_modules() {
    let fill = crate::backend::library::find_for("test", "fill_u32").unwrap();
    let args = [KernelArg::Ptr(0x1000), KernelArg::U32(7), KernelArg::U64(9)];
    assert!(matches!(
        node_arguments(Some(fill), &args[..2]),
        Err(Error::KernelArgumentMismatch {
            kernel: "fill_u32",
            ..
        })
    ));
    let mut checked = node_arguments(Some(fill), &args).unwrap();
    assert_eq!(checked.pointers().len(), 3);
    // A module's kernel: any number of values, each readable at its pointer as its own type.
    let many: Vec<KernelArg> = (0..11)
        .map(|i| match i % 4 {
            0 => KernelArg::Ptr(0x2000 + i),
            1 => KernelArg::U32(i as u32),
            2 => KernelArg::U64(1 << 40 | i as u64),
            _ => KernelArg::F32(i as f32 + 0.5),
        })
        .collect();
    let mut packed = node_arguments(None, &many).unwrap();
    let pointers = packed.pointers();
    assert_eq!(pointers.len(), many.len());
    for (pointer, arg) in pointers.iter().zip(&many) {
        // SAFETY: each pointer is to a live slot of `packed` holding the value's type at its
        // start.
        let same = unsafe {
            match *arg {
                KernelArg::Ptr(a) => *pointer.cast::<u64>() == a as u64,
                KernelArg::U32(v) => *pointer.cast::<u32>() == v,
                KernelArg::U64(v) => *pointer.cast::<u64>() == v,
                KernelArg::F32(v) => *pointer.cast::<f32>() == v,
            }
        };
        assert!(same, "{arg:?} not found at its pointer");
    }
}

/// A graph of three nodes for the graph tests: two fills, then a launch of kernel `7` (its
/// "module" is the kernel's value divided by ten) after both.
fn three_node_graph() -> crate::backend::graph::GraphDesc<u32> {
    use crate::backend::graph::{GraphDesc, NodeOp};
    use crate::backend::{FillValue, LaunchDims};
    let mut graph = GraphDesc::new();
    let fill = |dst| NodeOp::Fill {
        dst,
        value: FillValue::U8(1),
        count: 4,
    };
    let a = graph.add(fill(0x100), &[]).unwrap();
    let b = graph.add(fill(0x200), &[]).unwrap();
    let launch = NodeOp::Launch {
        kernel: 71,
        dims: LaunchDims::linear(1, 32),
        args: Vec::new(),
    };
    graph.add(launch, &[b, a]).unwrap();
    graph
}

#[test]
fn a_graph_is_built_node_by_node_with_the_driver_nodes_of_its_edges() {
    let desc = three_node_graph();
    let added = core::cell::RefCell::new(Vec::new());
    let destroyed = alloc::sync::Arc::new(core::sync::atomic::AtomicUsize::new(0));
    let counted = alloc::sync::Arc::clone(&destroyed);
    let graph = LiveGraph::build(
        &desc,
        |kernel: &u32| kernel / 10,
        || Ok("graph"),
        |graph, op, deps: &[usize]| {
            assert_eq!(graph, "graph");
            let mut added = added.borrow_mut();
            added.push((op.kind(), deps.to_vec()));
            Ok(100 + added.len())
        },
        |graph| Ok((graph, "exec")),
        move |graph| {
            assert_eq!(graph, "graph");
            counted.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
        },
    )
    .unwrap();
    assert_eq!(
        *added.borrow(),
        [
            ("fill", vec![]),
            ("fill", vec![]),
            ("launch", vec![102, 101])
        ]
    );
    assert_eq!((graph.graph(), graph.exec()), ("graph", ("graph", "exec")));
    assert_eq!((graph.len(), graph.is_empty()), (3, false));
    assert_eq!(graph.modules(), [7]);
    // Held for a call: the one module, and a module that cannot be held is the call's error.
    assert_eq!(graph.hold_modules(|module| Ok(module * 2)).unwrap(), [14]);
    let unloaded = Error::UnknownKernel {
        backend: "test",
        name: alloc::string::String::from("unloaded"),
    };
    assert_eq!(
        graph
            .hold_modules(|_| Err::<(), _>(unloaded.clone()))
            .unwrap_err(),
        unloaded
    );
    use crate::backend::graph::{NodeId, NodeOp};
    let fill = NodeOp::<u32>::Fill {
        dst: 0,
        value: crate::backend::FillValue::U32(1),
        count: 1,
    };
    assert_eq!(graph.node_for(NodeId(1), &fill), Ok(102));
    assert_eq!(
        graph.node_for(NodeId(2), &fill),
        Err(Error::GraphNodeKind {
            node: 2,
            recorded: "launch",
            given: "fill"
        })
    );
    assert_eq!(
        graph.node_for(NodeId(3), &fill),
        Err(Error::UnknownGraphNode { node: 3, nodes: 3 })
    );
    assert_eq!(graph.serialized(|| 5), 5);
    // The driver's graph goes when its last holder drops it, once.
    assert_eq!(destroyed.load(core::sync::atomic::Ordering::Relaxed), 0);
    drop(graph);
    assert_eq!(destroyed.load(core::sync::atomic::Ordering::Relaxed), 1);
}

#[test]
fn a_graph_step_that_fails_destroys_what_was_built_and_reports_the_step() {
    let desc = three_node_graph();
    let failure = |call: &'static str| {
        Error::Driver(DriverError {
            backend: "test",
            call,
            name: "E",
            code: 1,
        })
    };
    // Fail at each node in turn, then at the instantiation: the graph is destroyed once.
    for failing in 0..=3 {
        let destroyed = alloc::sync::Arc::new(core::sync::atomic::AtomicUsize::new(0));
        let counted = alloc::sync::Arc::clone(&destroyed);
        let added = Cell::new(0);
        let built = LiveGraph::<_, (), usize, u32>::build(
            &desc,
            |kernel| kernel / 10,
            || Ok("graph"),
            |_, _, _| {
                added.set(added.get() + 1);
                if added.get() > failing {
                    Err(failure("add"))
                } else {
                    Ok(added.get())
                }
            },
            |_| Err(failure("instantiate")),
            move |graph| {
                assert_eq!(graph, "graph");
                counted.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
            },
        );
        let expected = if failing == 3 { "instantiate" } else { "add" };
        assert_eq!(built.unwrap_err(), failure(expected));
        let times = destroyed.load(core::sync::atomic::Ordering::Relaxed);
        assert_eq!(times, 1, "failing at step {failing}");
    }
    // A graph that could not be created has nothing to destroy.
    let built = LiveGraph::<(), (), (), u32>::build(
        &desc,
        |kernel| kernel / 10,
        || Err(failure("create")),
        |_, _, _| panic!("no graph to add to"),
        |_| panic!("no graph to instantiate"),
        |_| panic!("no graph to destroy"),
    );
    assert_eq!(built.unwrap_err(), failure("create"));
}

#[test]
fn fill_elements_widen_to_32_bits_with_their_width() {
    use crate::backend::FillValue;
    assert_eq!(fill_element(FillValue::U8(0xab)), (0xab, 1));
    assert_eq!(fill_element(FillValue::U16(0xabcd)), (0xabcd, 2));
    assert_eq!(fill_element(FillValue::U32(0xdead_beef)), (0xdead_beef, 4));
}
