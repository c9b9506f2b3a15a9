//! What `gpu_recorder_block`'s arguments mean: a sub-allocator's block event (which allocator,
//! handed out, taken back, used) or a piece of a launch's announced footprint.

use crate::call::{BLOCK_FUNCTIONS, FOOTPRINT_FUNCTIONS, Kind};

/// What `gpu_recorder_block`'s arguments report: the event's function name (which names the
/// allocator) and its kind; `None` for an unknown event or allocator.
pub(super) fn block_event(
    op: u32,
    address: u64,
    bytes: u64,
    stream: u64,
) -> Option<(&'static str, Kind)> {
    let (event, allocator) = (op & 0xff, op >> 8);
    if event == 3 {
        let &(function, _) = FOOTPRINT_FUNCTIONS.get(allocator as usize)?;
        let kind = Kind::BlockAlloc {
            stream,
            address,
            bytes,
        };
        return Some((function, kind));
    }
    let kind = match event {
        0 => Kind::BlockAlloc {
            stream,
            address,
            bytes,
        },
        1 => Kind::BlockFree { stream, address },
        2 => Kind::BlockUse { stream, address },
        _ => return None,
    };
    let index = (allocator as usize).checked_mul(3)? + event as usize;
    let &(function, _) = BLOCK_FUNCTIONS.get(index)?;
    Some((function, kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_events_second_byte_names_its_allocator() {
        let alloc = block_event(0x100, 0x1000, 64, 7);
        assert_eq!(
            alloc,
            Some((
                "torch_block_alloc",
                Kind::BlockAlloc {
                    stream: 7,
                    address: 0x1000,
                    bytes: 64
                }
            ))
        );
        let free = block_event(0x201, 0x1000, 0, 7).map(|(name, _)| name);
        assert_eq!(free, Some("nvtx_block_free"));
        // Our plug-in's events, as it always sent them.
        let used = block_event(2, 0x1000, 0, 0).map(|(name, _)| name);
        assert_eq!(used, Some("gpurt_block_use"));
        assert_eq!(block_event(4, 0x1000, 0, 0), None);
        // A launch's footprint: its begin names the function, then a range written.
        let begin = block_event(3, 0xf1, 1, 0xa).map(|(name, _)| name);
        assert_eq!(begin, Some("gpurt_footprint_begin"));
        let written = block_event(0x203, 0x1000, 64, 0xa).map(|(name, _)| name);
        assert_eq!(written, Some("gpurt_footprint_w"));
        assert_eq!(block_event(0x403, 0x1000, 64, 0xa), None);
        // Our runtime's buffers, from its backends' note_buffer: no stream.
        let region = block_event(0x301, 0x1000, 0, 0).map(|(name, _)| name);
        assert_eq!(region, Some("gpurt_region_block_free"));
        assert_eq!(block_event(0x400, 0x1000, 0, 0), None);
        assert_eq!(block_event(u32::MAX, 0x1000, 0, 0), None);
    }
}
