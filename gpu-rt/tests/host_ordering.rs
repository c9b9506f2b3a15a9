//! Property test of the host backend's ordering: random programs of fills, copies, kernel
//! launches, event records and cross-stream (and cross-device) waits on four streams of two
//! devices. The work log must show every item starting after its stream's previous item and
//! after the record each wait captured had finished; records on another device's stream must
//! be refused without effect.

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::{Backend, KernelArg, LaunchDims};
use gpu_core::{DeviceId, Error};
use gpu_rt::host::{HostBackend, HostConfig, HostErrorCode, HostStream, WorkOutcome};
use proptest::prelude::*;

const STREAMS: usize = 4;
const EVENTS: usize = 4;
const BUFFERS: usize = 3;
const BYTES: usize = 4096;

/// Streams and events `i` belong to device `i / 2`.
fn device_of(i: usize) -> DeviceId {
    DeviceId((i / 2) as u32)
}

#[derive(Clone, Debug)]
enum Op {
    Fill {
        stream: usize,
        buffer: usize,
        value: u8,
    },
    Copy {
        stream: usize,
        from: usize,
        to: usize,
    },
    Launch {
        stream: usize,
        buffer: usize,
        value: u32,
    },
    Record {
        stream: usize,
        event: usize,
    },
    Wait {
        stream: usize,
        event: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let s = 0..STREAMS;
    let b = 0..BUFFERS;
    prop_oneof![
        (s.clone(), b.clone(), any::<u8>()).prop_map(|(stream, buffer, value)| Op::Fill {
            stream,
            buffer,
            value
        }),
        (s.clone(), b.clone(), b.clone()).prop_map(|(stream, from, to)| Op::Copy {
            stream,
            from,
            to
        }),
        (s.clone(), b, any::<u32>()).prop_map(|(stream, buffer, value)| Op::Launch {
            stream,
            buffer,
            value
        }),
        (s.clone(), 0..EVENTS).prop_map(|(stream, event)| Op::Record { stream, event }),
        (s, 0..EVENTS).prop_map(|(stream, event)| Op::Wait { stream, event }),
    ]
}

fn stream_of(op: &Op) -> usize {
    match *op {
        Op::Fill { stream, .. }
        | Op::Copy { stream, .. }
        | Op::Launch { stream, .. }
        | Op::Record { stream, .. }
        | Op::Wait { stream, .. } => stream,
    }
}

fn run(program: &[Op]) -> Result<(), TestCaseError> {
    let backend = HostBackend::new(HostConfig::with_devices(2));
    let mut streams: Vec<HostStream> = Vec::new();
    let mut events = Vec::new();
    for i in 0..STREAMS {
        backend.set_current_device(Some(device_of(i))).unwrap();
        streams.push(backend.stream_create(device_of(i)).unwrap());
        events.push(backend.event_create(device_of(i)).unwrap());
    }
    let buffers: Vec<(DeviceId, usize)> = (0..BUFFERS)
        .map(|i| {
            let device = DeviceId((i % 2) as u32);
            backend.set_current_device(Some(device)).unwrap();
            (
                device,
                backend
                    .allocate(device, MemoryKind::Device, BYTES)
                    .unwrap()
                    .unwrap(),
            )
        })
        .collect();

    // Per stream, the program index of each item it ran; per event, its last record's index.
    let mut items: Vec<Vec<usize>> = vec![Vec::new(); STREAMS];
    let mut last_record: Vec<Option<usize>> = vec![None; EVENTS];
    let mut waits_on: Vec<Option<usize>> = vec![None; program.len()];
    for (index, op) in program.iter().enumerate() {
        let stream = stream_of(op);
        let device = device_of(stream);
        backend.set_current_device(Some(device)).unwrap();
        let s = streams[stream];
        match *op {
            Op::Fill { buffer, value, .. } => {
                // SAFETY: a whole live allocation of `backend` (all are freed only at the end),
                // which the host never touches.
                unsafe { backend.fill(s, buffers[buffer].1, value, BYTES) }.unwrap()
            }
            Op::Copy { from, to, .. } => {
                // SAFETY: as for the fill, both sides.
                unsafe { backend.copy(s, buffers[to].1, buffers[from].1, BYTES) }.unwrap()
            }
            Op::Launch { buffer, value, .. } => {
                let kernel = backend.kernel(device, "fill_u32").unwrap();
                let args = [
                    KernelArg::Ptr(buffers[buffer].1),
                    KernelArg::U32(value),
                    KernelArg::U64((BYTES / 4) as u64),
                ];
                // SAFETY: as for the fill; the kernel writes exactly the buffer's words.
                unsafe { backend.launch(s, kernel, LaunchDims::linear(2, 128), &args) }.unwrap();
            }
            Op::Record { event, .. } => {
                let result = backend.event_record(events[event], s);
                if device_of(event) != device {
                    let refused = result.err().as_ref().and_then(HostErrorCode::of);
                    prop_assert_eq!(refused, Some(HostErrorCode::InvalidHandle));
                    continue;
                }
                result.unwrap();
                last_record[event] = Some(index);
            }
            Op::Wait { event, .. } => {
                backend.stream_wait_event(s, events[event]).unwrap();
                waits_on[index] = last_record[event];
            }
        }
        items[stream].push(index);
    }
    for (i, &s) in streams.iter().enumerate() {
        backend.set_current_device(Some(device_of(i))).unwrap();
        backend.stream_synchronize(s).unwrap();
    }

    // Start and finish of every program item, from the log (a stream logs in queue order).
    let log = backend.work_log();
    let mut times: Vec<Option<(u64, u64)>> = vec![None; program.len()];
    for (i, &s) in streams.iter().enumerate() {
        let records: Vec<_> = log.iter().filter(|r| r.stream == s).collect();
        prop_assert_eq!(records.len(), items[i].len());
        for (record, &index) in records.iter().zip(&items[i]) {
            prop_assert_eq!(record.outcome, WorkOutcome::Done);
            prop_assert!(record.started < record.finished);
            times[index] = Some((record.started, record.finished));
        }
        for pair in items[i].windows(2) {
            let (before, after) = (times[pair[0]].unwrap(), times[pair[1]].unwrap());
            prop_assert!(
                after.0 > before.1,
                "stream {} ran items {:?} out of order",
                i,
                pair
            );
        }
    }
    for (index, record) in waits_on.iter().enumerate() {
        if let Some(record) = *record {
            let (wait, recorded) = (times[index].unwrap(), times[record].unwrap());
            prop_assert!(
                wait.1 > recorded.1,
                "wait {} finished before record {}",
                index,
                record
            );
        }
    }

    for (device, address) in buffers {
        backend.set_current_device(Some(device)).unwrap();
        backend
            .free(device, MemoryKind::Device, address, None)
            .unwrap();
    }
    for i in 0..STREAMS {
        backend.set_current_device(Some(device_of(i))).unwrap();
        backend.event_destroy(events[i]).unwrap();
        backend.stream_destroy(streams[i]).unwrap();
    }
    let stats = backend.stats();
    prop_assert_eq!((stats.streams, stats.events, stats.allocations), (0, 0, 0));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn work_runs_in_stream_and_event_order(program in prop::collection::vec(op(), 1..40)) {
        run(&program)?;
    }
}

#[test]
fn an_unknown_device_is_refused_before_any_check_of_the_current_device() {
    let backend = HostBackend::new(HostConfig::with_devices(1));
    let err = backend.stream_create(DeviceId(1)).unwrap_err();
    assert_eq!(
        err,
        Error::UnknownDevice {
            device: DeviceId(1),
            device_count: 1
        }
    );
}
