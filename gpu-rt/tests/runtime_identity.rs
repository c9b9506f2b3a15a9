//! Every span knows its runtime: a buffer or pinned memory of one runtime given to another is
//! refused before anything is queued ([`Error::ForeignRuntime`]). Before, runtime 2 accepted
//! runtime 1's buffer, runtime 1 freed it (or shut down) without ordering that after runtime
//! 2's queued fill, and the fill wrote into memory that was gone: a segmentation fault from
//! safe code.

use std::sync::Arc;

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::LaunchDims;
use gpu_core::{DeviceId, Error};
use gpu_rt::host::{HostBackend, HostConfig};
use gpu_rt::runtime::{Arg, Runtime, RuntimeConfig};

const D0: DeviceId = DeviceId(0);
const BYTES: usize = 4096;

fn runtime() -> Runtime<HostBackend> {
    Runtime::new(HostBackend::new(HostConfig::with_devices(1))).unwrap()
}

fn foreign(owner: &Runtime<HostBackend>, to: &Runtime<HostBackend>, what: &'static str) -> Error {
    Error::ForeignRuntime {
        what,
        owner: owner.id(),
        runtime: to.id(),
    }
}

#[test]
fn every_operation_refuses_another_runtimes_memory_and_queues_nothing() {
    let (one, two) = (runtime(), runtime());
    assert_ne!(one.id(), two.id());
    let theirs = one.alloc(D0, MemoryKind::Device, BYTES).unwrap();
    let ours = two.alloc(D0, MemoryKind::Device, BYTES).unwrap();
    let mut host = vec![0u8; BYTES];
    let mut pinned_memory = vec![0u8; BYTES];
    let pinned = one.lock_host(&mut pinned_memory).unwrap();
    let refused = foreign(&one, &two, "span");
    let mut after = vec![two.fill(D0, ours.all(), 1, &mut vec![]).unwrap()];
    let before = two.stats().operations;

    assert_eq!(
        two.fill(D0, theirs.all(), 7, &mut after).err(),
        Some(refused.clone())
    );
    assert_eq!(
        two.copy(D0, ours.all(), theirs.all(), &mut after).err(),
        Some(refused.clone())
    );
    assert_eq!(
        two.copy(D0, theirs.all(), ours.all(), &mut after).err(),
        Some(refused.clone())
    );
    assert_eq!(
        two.copy(D0, ours.all(), pinned.span(0, BYTES).unwrap(), &mut after)
            .err(),
        Some(refused.clone())
    );
    assert_eq!(
        two.upload(D0, theirs.all(), &host, &mut after).err(),
        Some(refused.clone())
    );
    assert_eq!(
        two.download(D0, &mut host, theirs.all(), &mut after).err(),
        Some(refused.clone())
    );
    let fill_u32 = two.kernel(D0, "fill_u32").unwrap();
    let args = [
        Arg::Span(theirs.all()),
        Arg::U32(9),
        Arg::U64((BYTES / 4) as u64),
    ];
    // SAFETY: refused before anything is queued (and fill_u32 would stay inside the span).
    let launched = unsafe { fill_u32.launch(LaunchDims::linear(1, 64), &args, &mut after) };
    assert_eq!(launched.err(), Some(refused));

    // Nothing was planned, and the caller's token is still theirs to use.
    assert_eq!(two.stats().operations, before);
    assert_eq!(after.len(), 1);
    two.wait(after.pop().unwrap()).unwrap();

    // Freeing through the wrong runtime is refused; the buffer goes back to its own runtime.
    let token = two.fill(D0, ours.all(), 2, &mut vec![]).unwrap();
    assert_eq!(
        two.free_after(theirs, &token).err(),
        Some(foreign(&one, &two, "buffer"))
    );
    two.wait(token).unwrap();
    let another = one.alloc(D0, MemoryKind::Device, BYTES).unwrap();
    assert_eq!(two.free(another).err(), Some(foreign(&one, &two, "buffer")));
    drop((ours, pinned));
    two.shutdown().unwrap();
    one.shutdown().unwrap();
}

/// The scenario that crashed: runtime 2 queues a fill of runtime 1's buffer, runtime 1 frees
/// it and shuts down. Now the fill is refused, so nothing writes memory that is gone.
#[test]
fn a_buffer_freed_by_its_runtime_is_never_written_by_another() {
    for shared_backend in [false, true] {
        let backend = Arc::new(HostBackend::new(HostConfig::with_devices(1)));
        let open = || {
            if shared_backend {
                Runtime::shared(Arc::clone(&backend), RuntimeConfig::default()).unwrap()
            } else {
                runtime()
            }
        };
        let (one, two) = (open(), open());
        let buffer = one.alloc(D0, MemoryKind::Device, 64 << 20).unwrap();
        let refused = two.fill(D0, buffer.all(), 0xff, &mut vec![]);
        assert!(
            matches!(refused, Err(Error::ForeignRuntime { .. })),
            "{refused:?}"
        );
        drop(buffer);
        one.shutdown().unwrap();
        two.shutdown().unwrap();
    }
}
