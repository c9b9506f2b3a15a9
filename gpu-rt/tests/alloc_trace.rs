//! The runtime's allocation trace (`Runtime::record_allocations`): a seeded mix of allocations,
//! work on two streams and frees, recorded and replayed through `gpu_core::allocator::replay`,
//! predicts the runtime's own peak reserved bytes, segments and hits.

use std::sync::{Arc, Mutex};

use gpu_core::allocator::model::TraceRng;
use gpu_core::allocator::replay::Replay;
use gpu_rt::prelude::*;

/// A writer whose bytes the test reads back.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Shared {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_recorded_trace_replays_to_the_runtimes_own_figures() {
    let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1))).unwrap();
    let d0 = DeviceId(0);
    let text = Shared::default();
    let trace = rt.record_allocations(Box::new(text.clone())).unwrap();
    let mut rng = TraceRng::new(23);
    let mut live = Vec::new();
    for _ in 0..400 {
        if live.len() < 12 && rng.below(3) > 0 {
            let size = match rng.below(10) {
                0 => (2 << 20) + rng.below(6 << 20) as usize,
                _ => 256 + rng.below(200 << 10) as usize,
            };
            let buffer = if rng.below(2) == 0 {
                rt.alloc(d0, MemoryKind::Device, size).unwrap()
            } else {
                let (buffer, token) = rt
                    .alloc_after(d0, MemoryKind::Device, size, &mut vec![])
                    .unwrap();
                rt.wait(token).unwrap();
                buffer
            };
            // Work on the buffer (on whichever stream the planner picks), waited for.
            let filled = rt.fill(d0, buffer.all(), 7, &mut vec![]).unwrap();
            rt.wait(filled).unwrap();
            live.push(buffer);
        } else if !live.is_empty() {
            let index = rng.below(live.len() as u64) as usize;
            drop(live.swap_remove(index));
        }
    }
    drop(live);
    trace.finish().unwrap();
    let measured = rt.allocator_stats(d0, MemoryKind::Device).unwrap();
    let text = text.0.lock().unwrap().clone();
    let mut replay = Replay::new(Vec::new(), None);
    for line in text.split(|&b| b == b'\n') {
        replay.feed_line(line).unwrap();
    }
    assert!(replay.events() > 400, "{} events", replay.events());
    let report = replay.finish();
    let predicted = &report[0].devices[0].1;
    assert_eq!(
        (
            predicted.peak_reserved,
            predicted.segment_allocations,
            predicted.peak_requested
        ),
        (
            measured.peak_reserved,
            measured.segment_allocations,
            measured.peak_requested
        )
    );
    assert_eq!(
        predicted.hits + predicted.cross_stream_hits,
        measured.hits + measured.cross_stream_hits
    );
}
