//! Property test of the host backend's API rules against a small model: random calls, with
//! stale handles, wrong current devices, unknown devices, mismatched kinds, overlapping
//! registrations and out-of-bounds ranges. Each call must succeed or fail exactly as the model
//! predicts (with the predicted error), live-object counts must match after every call, and
//! cleaning up what the model says is live must leave nothing behind.

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::{Backend, KernelArg, LaunchDims};
use gpu_core::{ByteRange, DeviceId, Error, Result};
use gpu_rt::host::{HostBackend, HostConfig, HostErrorCode, HostEvent, HostStream};
use proptest::prelude::*;

const DEVICES: u32 = 2;
/// Device numbers drawn include one the backend does not have.
const DRAWN_DEVICES: u32 = DEVICES + 1;
const ARENA: usize = 1 << 16;
const KINDS: [MemoryKind; 3] = MemoryKind::CACHED;

/// A device as drawn: `None` means the thread's current device (or device 0 if none is).
type Device = Option<u32>;
/// A stream, event or allocation as drawn: taken modulo one more than the number made so far,
/// where the extra value names a handle this backend never gave out.
type Pick = usize;
/// Whether to make the object's device current first, as the runtime's device guard does.
type Guard = bool;

#[derive(Clone, Debug)]
enum Call {
    SetCurrent(Option<u32>),
    StreamCreate(Device),
    StreamDestroy(Pick, Guard),
    StreamSynchronize(Pick, Guard),
    EventCreate(Device),
    EventDestroy(Pick, Guard),
    EventRecord(Pick, Pick, Guard),
    StreamWaitEvent(Pick, Pick, Guard),
    EventQuery(Pick),
    Allocate(Device, usize, usize),
    /// Allocation, device and kind (`None`: the allocation's own), stream to free after.
    Free(Pick, Device, Option<usize>, Option<Pick>, Guard),
    Fill(Pick, Pick, usize, usize, Guard),
    Launch(Pick, Pick, u64, Guard),
    Register(usize, usize),
    Unregister(usize),
    PinnedExtent(usize),
}

fn call() -> impl Strategy<Value = Call> {
    let drawn = 0..DRAWN_DEVICES;
    let device = prop_oneof![3 => Just(None), 1 => drawn.clone().prop_map(Some)];
    let pick = 0..16usize;
    let guard = prop::bool::weighted(0.8);
    let kind = proptest::option::weighted(0.3, 0..KINDS.len());
    prop_oneof![
        2 => proptest::option::of(drawn).prop_map(Call::SetCurrent),
        3 => device.clone().prop_map(Call::StreamCreate),
        1 => (pick.clone(), guard).prop_map(|(s, g)| Call::StreamDestroy(s, g)),
        1 => (pick.clone(), guard).prop_map(|(s, g)| Call::StreamSynchronize(s, g)),
        3 => device.clone().prop_map(Call::EventCreate),
        1 => (pick.clone(), guard).prop_map(|(e, g)| Call::EventDestroy(e, g)),
        3 => (pick.clone(), pick.clone(), guard)
            .prop_map(|(e, s, g)| Call::EventRecord(e, s, g)),
        2 => (pick.clone(), pick.clone(), guard)
            .prop_map(|(s, e, g)| Call::StreamWaitEvent(s, e, g)),
        1 => pick.clone().prop_map(Call::EventQuery),
        3 => (device.clone(), 0..KINDS.len(), 0..3000usize)
            .prop_map(|(d, k, n)| Call::Allocate(d, k, n)),
        2 => (
            pick.clone(),
            proptest::option::weighted(0.3, 0..DRAWN_DEVICES),
            kind,
            proptest::option::of(pick.clone()),
            guard
        )
            .prop_map(|(a, d, k, after, g)| Call::Free(a, d, k, after, g)),
        2 => (pick.clone(), pick.clone(), 0..3000usize, 0..3000usize, guard)
            .prop_map(|(s, a, offset, len, g)| Call::Fill(s, a, offset, len, g)),
        2 => (pick.clone(), pick, 0..1000u64, guard)
            .prop_map(|(s, a, words, g)| Call::Launch(s, a, words, g)),
        2 => (0..ARENA, 1..4096usize).prop_map(|(offset, len)| Call::Register(offset, len)),
        1 => (0..ARENA).prop_map(Call::Unregister),
        1 => (0..ARENA).prop_map(Call::PinnedExtent),
    ]
}

struct Stream {
    handle: HostStream,
    device: u32,
    live: bool,
}

struct Event {
    handle: HostEvent,
    device: u32,
    live: bool,
}

struct Allocation {
    address: usize,
    size: usize,
    device: u32,
    kind: MemoryKind,
    live: bool,
}

/// What the backend should hold, and the handles it gave out (live or not).
#[derive(Default)]
struct Model {
    current: Option<u32>,
    streams: Vec<Stream>,
    events: Vec<Event>,
    allocations: Vec<Allocation>,
    /// Registered ranges as (offset in the arena, length).
    registered: Vec<(usize, usize)>,
}

/// The outcome the model predicts: success, or the host error code (or another typed error).
#[derive(Debug, PartialEq)]
enum Expect {
    Ok,
    Host(HostErrorCode),
    UnknownDevice,
    ZeroSize,
}

fn outcome<T>(result: &Result<T>) -> Expect {
    match result {
        Ok(_) => Expect::Ok,
        Err(Error::UnknownDevice { .. }) => Expect::UnknownDevice,
        Err(Error::ZeroSize { .. }) => Expect::ZeroSize,
        Err(e) => {
            HostErrorCode::of(e).map_or_else(|| panic!("unexpected error {e:?}"), Expect::Host)
        }
    }
}

use Expect::Host;
use HostErrorCode::{
    InvalidHandle, InvalidValue, MemoryAlreadyRegistered, MemoryNotRegistered, WrongCurrentDevice,
};

impl Model {
    /// The check every device call makes: a known device, current on this thread.
    fn on_device(&self, device: u32) -> Option<Expect> {
        if device >= DEVICES {
            Some(Expect::UnknownDevice)
        } else if self.current != Some(device) {
            Some(Host(WrongCurrentDevice))
        } else {
            None
        }
    }

    /// A live stream whose device is current.
    fn on_stream(&self, index: usize) -> core::result::Result<&Stream, Expect> {
        match self.streams.get(index) {
            Some(s) if s.live => self.on_device(s.device).map_or(Ok(s), Err),
            _ => Err(Host(InvalidHandle)),
        }
    }

    fn live_event(&self, index: usize) -> Option<&Event> {
        self.events.get(index).filter(|e| e.live)
    }

    fn overlaps_registered(&self, offset: usize, len: usize) -> bool {
        self.registered
            .iter()
            .any(|&(o, l)| o < offset + len && offset < o + l)
    }
}

struct Harness {
    backend: HostBackend,
    model: Model,
    arena: Vec<u8>,
    /// A valid handle for a drawn index that names nothing yet (a stale handle from another
    /// backend, so it is never live here).
    foreign_stream: HostStream,
    foreign_event: HostEvent,
}

impl Harness {
    fn device(&self, device: Device) -> u32 {
        device.unwrap_or(self.model.current.unwrap_or(0))
    }

    fn stream_index(&self, pick: Pick) -> usize {
        pick % (self.model.streams.len() + 1)
    }

    fn event_index(&self, pick: Pick) -> usize {
        pick % (self.model.events.len() + 1)
    }

    fn stream(&self, index: usize) -> HostStream {
        self.model
            .streams
            .get(index)
            .map_or(self.foreign_stream, |s| s.handle)
    }

    fn event(&self, index: usize) -> HostEvent {
        self.model
            .events
            .get(index)
            .map_or(self.foreign_event, |e| e.handle)
    }

    fn arena(&self, offset: usize) -> usize {
        self.arena.as_ptr() as usize + offset
    }

    /// Makes `device` current (when `guard` says so and there is one), in both.
    fn guard(&mut self, guard: Guard, device: Option<u32>) {
        if let (true, Some(device)) = (guard, device) {
            self.backend
                .set_current_device(Some(DeviceId(device)))
                .unwrap();
            self.model.current = Some(device);
        }
    }

    /// The live allocation `pick` names, if any (stale addresses are never used: a new
    /// allocation may have taken their memory).
    fn live_allocation(&self, pick: Pick) -> Option<usize> {
        let live: Vec<usize> = (0..self.model.allocations.len())
            .filter(|&i| self.model.allocations[i].live)
            .collect();
        (!live.is_empty()).then(|| live[pick % live.len()])
    }

    fn apply(&mut self, call: &Call) -> Result<(), TestCaseError> {
        // Make the drawn object's device current first, where the call asks for it.
        match *call {
            Call::StreamDestroy(s, g)
            | Call::StreamSynchronize(s, g)
            | Call::EventRecord(_, s, g)
            | Call::StreamWaitEvent(s, _, g)
            | Call::Fill(s, _, _, _, g)
            | Call::Launch(s, _, _, g) => {
                let device = self
                    .model
                    .streams
                    .get(self.stream_index(s))
                    .map(|s| s.device);
                self.guard(g, device);
            }
            Call::EventDestroy(e, g) => {
                let device = self.model.events.get(self.event_index(e)).map(|e| e.device);
                self.guard(g, device);
            }
            Call::Free(a, _, _, _, g) => {
                let device = self
                    .live_allocation(a)
                    .map(|a| self.model.allocations[a].device);
                self.guard(g, device);
            }
            _ => {}
        }
        let b = &self.backend;
        let m = &self.model;
        match *call {
            Call::SetCurrent(device) => {
                let got = b.set_current_device(device.map(DeviceId));
                let expect = match device {
                    Some(d) if d >= DEVICES => Expect::UnknownDevice,
                    _ => Expect::Ok,
                };
                prop_assert_eq!(outcome(&got), expect);
                if got.is_ok() {
                    self.model.current = device;
                }
            }
            Call::StreamCreate(d) => {
                let d = self.device(d);
                let got = b.stream_create(DeviceId(d));
                prop_assert_eq!(outcome(&got), m.on_device(d).unwrap_or(Expect::Ok));
                if let Ok(handle) = got {
                    self.model.streams.push(Stream {
                        handle,
                        device: d,
                        live: true,
                    });
                }
            }
            Call::StreamDestroy(s, _) => {
                let i = self.stream_index(s);
                let got = b.stream_destroy(self.stream(i));
                prop_assert_eq!(outcome(&got), m.on_stream(i).err().unwrap_or(Expect::Ok));
                if got.is_ok() {
                    self.model.streams[i].live = false;
                }
            }
            Call::StreamSynchronize(s, _) => {
                let i = self.stream_index(s);
                let got = b.stream_synchronize(self.stream(i));
                prop_assert_eq!(outcome(&got), m.on_stream(i).err().unwrap_or(Expect::Ok));
            }
            Call::EventCreate(d) => {
                let d = self.device(d);
                let got = b.event_create(DeviceId(d));
                prop_assert_eq!(outcome(&got), m.on_device(d).unwrap_or(Expect::Ok));
                if let Ok(handle) = got {
                    self.model.events.push(Event {
                        handle,
                        device: d,
                        live: true,
                    });
                }
            }
            Call::EventDestroy(e, _) => {
                let i = self.event_index(e);
                let got = b.event_destroy(self.event(i));
                let expect = match m.live_event(i) {
                    None => Host(InvalidHandle),
                    Some(e) => m.on_device(e.device).unwrap_or(Expect::Ok),
                };
                prop_assert_eq!(outcome(&got), expect);
                if got.is_ok() {
                    self.model.events[i].live = false;
                }
            }
            Call::EventRecord(e, s, _) => {
                let (e, s) = (self.event_index(e), self.stream_index(s));
                let got = b.event_record(self.event(e), self.stream(s));
                let expect = match (m.on_stream(s), m.live_event(e)) {
                    (Err(expect), _) => expect,
                    (Ok(_), None) => Host(InvalidHandle),
                    (Ok(stream), Some(event)) if stream.device != event.device => {
                        Host(InvalidHandle)
                    }
                    _ => Expect::Ok,
                };
                prop_assert_eq!(outcome(&got), expect);
            }
            Call::StreamWaitEvent(s, e, _) => {
                let (s, e) = (self.stream_index(s), self.event_index(e));
                let got = b.stream_wait_event(self.stream(s), self.event(e));
                let expect = match (m.on_stream(s), m.live_event(e)) {
                    (Err(expect), _) => expect,
                    (Ok(_), None) => Host(InvalidHandle),
                    _ => Expect::Ok,
                };
                prop_assert_eq!(outcome(&got), expect);
            }
            Call::EventQuery(e) => {
                let e = self.event_index(e);
                let got = b.event_query(self.event(e));
                let expect = m.live_event(e).map_or(Host(InvalidHandle), |_| Expect::Ok);
                prop_assert_eq!(outcome(&got), expect);
            }
            Call::Allocate(d, k, size) => {
                let (d, kind) = (self.device(d), KINDS[k]);
                let got = b.allocate(DeviceId(d), kind, size);
                let expect = m.on_device(d).unwrap_or(if size == 0 {
                    Expect::ZeroSize
                } else {
                    Expect::Ok
                });
                prop_assert_eq!(outcome(&got), expect);
                if let Ok(address) = got {
                    let address = address.expect("1 GiB per device is never exhausted here");
                    self.model.allocations.push(Allocation {
                        address,
                        size,
                        device: d,
                        kind,
                        live: true,
                    });
                }
            }
            Call::Free(a, d, k, after, _) => {
                let Some(a) = self.live_allocation(a) else {
                    return Ok(());
                };
                let allocation = &m.allocations[a];
                let d = d.unwrap_or(allocation.device);
                let kind = k.map_or(allocation.kind, |k| KINDS[k]);
                let after = after.map(|s| self.stream_index(s));
                let got = b.free(
                    DeviceId(d),
                    kind,
                    allocation.address,
                    after.map(|s| self.stream(s)),
                );
                // A free orders after a live stream of the device it frees on (CUDA's
                // cuMemFreeAsync takes a stream of the current context).
                let after_usable =
                    after.is_none_or(|s| m.streams.get(s).is_some_and(|s| s.live && s.device == d));
                let expect = m.on_device(d).unwrap_or(if !after_usable {
                    Host(InvalidHandle)
                } else if allocation.device != d || allocation.kind != kind {
                    Host(InvalidValue)
                } else {
                    Expect::Ok
                });
                prop_assert_eq!(outcome(&got), expect);
                if got.is_ok() {
                    self.model.allocations[a].live = false;
                }
            }
            Call::Fill(s, a, offset, len, _) => {
                let Some(a) = self.live_allocation(a) else {
                    return Ok(());
                };
                let (s, allocation) = (self.stream_index(s), &m.allocations[a]);
                // Start inside the allocation (a start past it would be taken as the caller's
                // host memory, which this test does not own); the end may run past it.
                let offset = offset % allocation.size;
                // SAFETY: the start lies in a live allocation of `b` (the model tracks it), so
                // the host backend either refuses the range (past the end) or holds the
                // allocation for the fill; the host never touches it.
                let got = unsafe { b.fill(self.stream(s), allocation.address + offset, 0xA5, len) };
                let expect = match m.on_stream(s) {
                    Err(expect) => expect,
                    Ok(_) if len == 0 || offset + len <= allocation.size => Expect::Ok,
                    Ok(_) => Host(InvalidValue),
                };
                prop_assert_eq!(outcome(&got), expect);
            }
            Call::Launch(s, a, words, _) => {
                let Some(a) = self.live_allocation(a) else {
                    return Ok(());
                };
                let (s, allocation) = (self.stream_index(s), &m.allocations[a]);
                let Ok(stream) = m.on_stream(s) else {
                    return Ok(());
                };
                let words = words.min((allocation.size / 4) as u64);
                let kernel = b.kernel(DeviceId(stream.device), "fill_u32");
                prop_assert!(kernel.is_ok());
                let args = [
                    KernelArg::Ptr(allocation.address),
                    KernelArg::U32(7),
                    KernelArg::U64(words),
                ];
                // SAFETY: the one pointer is a live allocation of `b`, which the host backend
                // holds for the kernel (and a host-backend kernel cannot reach past it).
                let got = unsafe {
                    b.launch(
                        self.stream(s),
                        kernel.unwrap(),
                        LaunchDims::linear(2, 32),
                        &args,
                    )
                };
                prop_assert_eq!(outcome(&got), Expect::Ok);
            }
            Call::Register(offset, len) => {
                let len = len.min(ARENA - offset);
                let range = ByteRange::new(self.arena(offset), len).unwrap();
                let got = b.host_register(range, &mut [0; DEVICES as usize]);
                let expect = if m.overlaps_registered(offset, len) {
                    Host(MemoryAlreadyRegistered)
                } else {
                    Expect::Ok
                };
                prop_assert_eq!(outcome(&got), expect);
                if got.is_ok() {
                    self.model.registered.push((offset, len));
                }
            }
            Call::Unregister(offset) => {
                let got = b.host_unregister(self.arena(offset));
                let expect = if m.registered.iter().any(|&(o, _)| o == offset) {
                    Expect::Ok
                } else if m.overlaps_registered(offset, 1) {
                    Host(InvalidValue)
                } else {
                    Host(MemoryNotRegistered)
                };
                prop_assert_eq!(outcome(&got), expect);
                if got.is_ok() {
                    self.model.registered.retain(|&(o, _)| o != offset);
                }
            }
            Call::PinnedExtent(offset) => {
                let mut ptrs = [0; DEVICES as usize];
                let got = b.host_pinned_extent(self.arena(offset), &mut ptrs);
                let expected = m
                    .registered
                    .iter()
                    .find(|&&(o, l)| o <= offset && offset < o + l)
                    .map(|&(o, l)| ByteRange::new(self.arena(o), l).unwrap());
                prop_assert_eq!(got, Ok(expected));
                if let Some(extent) = expected {
                    prop_assert_eq!(ptrs, [extent.start; DEVICES as usize]);
                }
            }
        }
        let stats = self.backend.stats();
        let m = &self.model;
        prop_assert_eq!(stats.streams, m.streams.iter().filter(|s| s.live).count());
        prop_assert_eq!(stats.events, m.events.iter().filter(|e| e.live).count());
        prop_assert_eq!(
            stats.allocations,
            m.allocations.iter().filter(|a| a.live).count()
        );
        prop_assert_eq!(stats.registered_ranges, m.registered.len());
        Ok(())
    }

    /// Destroys everything the model says is live; the backend must then hold nothing.
    fn clean_up(self) -> Result<(), TestCaseError> {
        let Harness {
            backend,
            model,
            arena,
            ..
        } = self;
        for s in model.streams.iter().filter(|s| s.live) {
            backend
                .set_current_device(Some(DeviceId(s.device)))
                .unwrap();
            backend.stream_destroy(s.handle).unwrap();
        }
        for e in model.events.iter().filter(|e| e.live) {
            backend
                .set_current_device(Some(DeviceId(e.device)))
                .unwrap();
            backend.event_destroy(e.handle).unwrap();
        }
        for a in model.allocations.iter().filter(|a| a.live) {
            backend
                .set_current_device(Some(DeviceId(a.device)))
                .unwrap();
            backend
                .free(DeviceId(a.device), a.kind, a.address, None)
                .unwrap();
        }
        for &(offset, _) in &model.registered {
            backend
                .host_unregister(arena.as_ptr() as usize + offset)
                .unwrap();
        }
        let stats = backend.stats();
        prop_assert_eq!(
            (
                stats.streams,
                stats.events,
                stats.allocations,
                stats.registered_ranges
            ),
            (0, 0, 0, 0)
        );
        // The arena outlives the backend's workers.
        drop(backend);
        drop(arena);
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn every_call_succeeds_or_fails_as_the_model_says(calls in prop::collection::vec(call(), 1..80)) {
        let other = HostBackend::new(HostConfig::with_devices(1));
        other.set_current_device(Some(DeviceId(0))).unwrap();
        let foreign_stream = other.stream_create(DeviceId(0)).unwrap();
        let foreign_event = other.event_create(DeviceId(0)).unwrap();
        let mut harness = Harness {
            backend: HostBackend::new(HostConfig::with_devices(DEVICES as usize)),
            model: Model::default(),
            arena: vec![0u8; ARENA],
            foreign_stream,
            foreign_event,
        };
        for call in &calls {
            harness.apply(call)?;
        }
        harness.clean_up()?;
        other.event_destroy(foreign_event).unwrap();
        other.stream_destroy(foreign_stream).unwrap();
    }
}
