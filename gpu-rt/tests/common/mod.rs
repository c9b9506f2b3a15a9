//! What more than one of the runtime's test files checks: that a block freed while work still
//! used it, and handed out again, was not written by that work after its new owner's fill.

use gpu_core::DeviceId;
use gpu_core::allocator::MemoryKind;
use gpu_core::token::Token;
use gpu_rt::host::HostBackend;
use gpu_rt::runtime::{Buffer, Runtime};

/// Downloads `second` after `filled` (its fill with 7s) and checks it holds only 7s where it
/// reuses the block at `first_address` (the earlier work, `earlier`, ran after the free was
/// asked); where it does not, a second segment must have been allocated for it.
pub(crate) fn assert_reuse_waited(
    rt: &Runtime<HostBackend>,
    device: DeviceId,
    (second, first_address): (&Buffer<'_, HostBackend>, usize),
    filled: Token,
    earlier: &str,
) {
    let mut back = vec![0u8; second.size()];
    rt.download(device, &mut back, second.all(), &mut vec![filled])
        .unwrap();
    if second.address() == first_address {
        assert!(
            back.iter().all(|&b| b == 7),
            "the reused block was overwritten by {earlier}"
        );
    } else {
        let stats = rt.stats().allocator;
        let (_, _, device_stats) = stats
            .iter()
            .find(|(_, kind, _)| *kind == MemoryKind::Device)
            .unwrap();
        assert!(
            device_stats.misses >= 2,
            "not reused, so a second segment was allocated"
        );
    }
}
