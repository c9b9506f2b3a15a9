//! The trace checker against a plain reference model: random calls over a few streams and
//! events (default streams, exit, calls after it, objects created again under one name),
//! checked with a small memory of destroys by the checker and by a model that keeps the whole
//! history by name and decides what the checker has forgotten by counting destroys; and the
//! streaming checker against the in-memory one on the same calls as text.

use std::collections::BTreeMap;

use gpu_core::id::{DeviceId, EventId, StreamId};
use gpu_core::token::{Checker, DefectKind, Finding, StreamingChecker, TraceObject, TraceOp};
use gpu_core::token::{parse_trace, write_trace};
use proptest::prelude::*;

const NAMES: u32 = 4;
const DEVICES: u32 = 2;

/// A call with stream and event numbers (taken modulo [`NAMES`], each standing for an id) and
/// devices (modulo [`DEVICES`]).
#[derive(Clone, Debug)]
enum Call {
    CreateStream(u32, u32),
    DefaultStream(u32, u32),
    DestroyStream(u32),
    CreateEvent(u32, u32),
    DestroyEvent(u32),
    Record(u32, u32),
    Wait(u32, u32),
    SynchronizeStream(u32),
    SynchronizeEvent(u32),
    QueryStream(u32),
    QueryEvent(u32),
    Launch(u32, Option<u32>),
    PeerCopy(u32, bool),
    Exit,
}

impl Call {
    fn op(&self) -> TraceOp {
        // Ids far apart: the checker keeps small ids in a vector and large ones in a map.
        let s = |n: u32| StreamId(n % NAMES * 40_000);
        let e = |n: u32| EventId(n % NAMES * 1_000_000_000);
        let d = |n: u32| DeviceId(n % DEVICES);
        match *self {
            Call::CreateStream(x, dev) => TraceOp::CreateStream {
                stream: s(x),
                device: d(dev),
            },
            Call::DefaultStream(x, dev) => TraceOp::DefaultStream {
                stream: s(x),
                device: d(dev),
            },
            Call::DestroyStream(x) => TraceOp::DestroyStream { stream: s(x) },
            Call::CreateEvent(x, dev) => TraceOp::CreateEvent {
                event: e(x),
                device: d(dev),
            },
            Call::DestroyEvent(x) => TraceOp::DestroyEvent { event: e(x) },
            Call::Record(x, y) => TraceOp::Record {
                event: e(x),
                stream: s(y),
            },
            Call::Wait(x, y) => TraceOp::Wait {
                stream: s(x),
                event: e(y),
            },
            Call::SynchronizeStream(x) => TraceOp::SynchronizeStream { stream: s(x) },
            Call::SynchronizeEvent(x) => TraceOp::SynchronizeEvent { event: e(x) },
            Call::QueryStream(x) => TraceOp::QueryStream { stream: s(x) },
            Call::QueryEvent(x) => TraceOp::QueryEvent { event: e(x) },
            Call::Launch(x, dev) => TraceOp::Launch {
                stream: s(x),
                device: dev.map(d),
            },
            Call::PeerCopy(x, direct) => TraceOp::PeerCopy {
                stream: s(x),
                direct,
            },
            Call::Exit => TraceOp::Exit,
        }
    }
}

fn call() -> impl Strategy<Value = Call> {
    let n = || 0..NAMES;
    let d = || 0..DEVICES;
    prop_oneof![
        4 => (n(), d()).prop_map(|(x, dev)| Call::CreateStream(x, dev)),
        1 => (n(), d()).prop_map(|(x, dev)| Call::DefaultStream(x, dev)),
        3 => n().prop_map(Call::DestroyStream),
        4 => (n(), d()).prop_map(|(x, dev)| Call::CreateEvent(x, dev)),
        3 => n().prop_map(Call::DestroyEvent),
        3 => (n(), n()).prop_map(|(x, y)| Call::Record(x, y)),
        3 => (n(), n()).prop_map(|(x, y)| Call::Wait(x, y)),
        1 => n().prop_map(Call::SynchronizeStream),
        1 => n().prop_map(Call::SynchronizeEvent),
        1 => n().prop_map(Call::QueryStream),
        1 => n().prop_map(Call::QueryEvent),
        3 => (n(), prop::option::of(d())).prop_map(|(x, dev)| Call::Launch(x, dev)),
        1 => (n(), any::<bool>()).prop_map(|(x, direct)| Call::PeerCopy(x, direct)),
        1 => Just(Call::Exit),
    ]
}

/// An object: `true` for a stream, and its number.
type Object = (bool, u32);

/// What a finding says, objects by kind and number, positions as call indexes.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Said {
    Leaked(Object),
    DestroyedTwice(Object, usize),
    UsedAfterDestroy(Object, usize),
    NeverCreated(Object),
    NeverCreatedOrForgotten(Object),
    CreatedWhileAlive(Object, usize),
    WaitBeforeRecord(u32),
    RecordOnOtherDevice(u32, u32, u32, u32),
    StreamOnOtherDevice(u32, u32, u32),
    DefaultStreamDestroyed(u32),
    CallAfterExit,
    AliveAtExit(Object),
}

fn object(o: TraceObject) -> Object {
    match o {
        TraceObject::Stream(s) => (true, s.0),
        TraceObject::Event(e) => (false, e.0),
    }
}

/// The checker's finding as the model says it.
fn said(finding: Finding, remembered: usize) -> (usize, Said) {
    let Finding::Defect(defect) = finding else {
        let Finding::AliveAtExit {
            object: o,
            created_at,
        } = finding
        else {
            unreachable!()
        };
        return (created_at, Said::AliveAtExit(object(o)));
    };
    let kind = match defect.kind {
        DefectKind::Leaked { object: o } => Said::Leaked(object(o)),
        DefectKind::DestroyedTwice {
            object: o,
            first_destroyed_at,
        } => Said::DestroyedTwice(object(o), first_destroyed_at),
        DefectKind::UsedAfterDestroy {
            object: o,
            destroyed_at,
        } => Said::UsedAfterDestroy(object(o), destroyed_at),
        DefectKind::NeverCreated { object: o } => Said::NeverCreated(object(o)),
        DefectKind::NeverCreatedOrForgotten {
            object: o,
            remembered: r,
        } => {
            assert_eq!(r, remembered);
            Said::NeverCreatedOrForgotten(object(o))
        }
        DefectKind::CreatedWhileAlive {
            object: o,
            created_at,
        } => Said::CreatedWhileAlive(object(o), created_at),
        DefectKind::WaitBeforeRecord { event } => Said::WaitBeforeRecord(event.0),
        DefectKind::RecordOnOtherDevice {
            event,
            event_device,
            stream,
            stream_device,
        } => Said::RecordOnOtherDevice(event.0, event_device.0, stream.0, stream_device.0),
        DefectKind::StreamOnOtherDevice {
            stream,
            stream_device,
            device,
        } => Said::StreamOnOtherDevice(stream.0, stream_device.0, device.0),
        DefectKind::DefaultStreamDestroyed { stream } => Said::DefaultStreamDestroyed(stream.0),
        DefectKind::CallAfterExit => Said::CallAfterExit,
    };
    (defect.position, kind)
}

#[derive(Clone, Copy, Debug)]
enum Life {
    Alive { created_at: usize },
    Default { declared_at: usize },
    Destroyed { at: usize },
}

#[derive(Clone, Copy, Debug)]
struct State {
    life: Life,
    device: u32,
    recorded: bool,
}

/// The plain model: every object's last state by name, every successful destroy's position.
struct Model {
    remembered: usize,
    objects: BTreeMap<Object, State>,
    /// Positions of the destroys of live objects, streams then events.
    destroys: [Vec<usize>; 2],
    /// Whether a destroyed object of the kind was ever forgotten.
    forgot_any: [bool; 2],
    exited: bool,
    said: Vec<(usize, Said)>,
}

fn kind(o: Object) -> usize {
    usize::from(!o.0)
}

impl Model {
    /// The object's state, unless it was destroyed and `remembered` destroys of its kind
    /// came after.
    fn state(&self, o: Object) -> Option<State> {
        let state = *self.objects.get(&o)?;
        match state.life {
            Life::Destroyed { at }
                if self.destroys[kind(o)].iter().filter(|&&d| d > at).count()
                    >= self.remembered =>
            {
                None
            }
            _ => Some(state),
        }
    }

    fn unknown(&mut self, at: usize, o: Object) {
        let said = if self.forgot_any[kind(o)] {
            Said::NeverCreatedOrForgotten(o)
        } else {
            Said::NeverCreated(o)
        };
        self.said.push((at, said));
    }

    fn use_object(&mut self, at: usize, o: Object) -> Option<State> {
        match self.state(o) {
            None => {
                self.unknown(at, o);
                None
            }
            Some(State {
                life: Life::Destroyed { at: destroyed },
                ..
            }) => {
                self.said.push((at, Said::UsedAfterDestroy(o, destroyed)));
                None
            }
            live => live,
        }
    }

    fn create(&mut self, at: usize, o: Object, device: u32, default: bool) {
        let earlier = match self.state(o).map(|s| s.life) {
            Some(Life::Alive { created_at }) => created_at,
            Some(Life::Default { .. }) if default => return,
            Some(Life::Default { declared_at }) => declared_at,
            None | Some(Life::Destroyed { .. }) => {
                let life = if default {
                    Life::Default { declared_at: at }
                } else {
                    Life::Alive { created_at: at }
                };
                let state = State {
                    life,
                    device,
                    recorded: false,
                };
                self.objects.insert(o, state);
                return;
            }
        };
        self.said.push((at, Said::CreatedWhileAlive(o, earlier)));
    }

    fn destroy(&mut self, at: usize, o: Object) {
        match self.state(o).map(|s| s.life) {
            None => self.unknown(at, o),
            Some(Life::Alive { .. }) => {
                self.objects.get_mut(&o).unwrap().life = Life::Destroyed { at };
                self.destroys[kind(o)].push(at);
                // An object is forgotten by the destroy that makes `remembered` after its own.
                for (&other, state) in &self.objects {
                    if let Life::Destroyed { at: d } = state.life
                        && kind(other) == kind(o)
                        && self.destroys[kind(o)].iter().filter(|&&x| x > d).count()
                            == self.remembered
                    {
                        self.forgot_any[kind(o)] = true;
                    }
                }
            }
            Some(Life::Default { .. }) => self.said.push((at, Said::DefaultStreamDestroyed(o.1))),
            Some(Life::Destroyed { at: first }) => {
                self.said.push((at, Said::DestroyedTwice(o, first)))
            }
        }
    }

    fn wait_on(&mut self, at: usize, event: u32) {
        if let Some(state) = self.use_object(at, (false, event))
            && !state.recorded
        {
            self.said.push((at, Said::WaitBeforeRecord(event)));
        }
    }

    /// The created objects alive, in order of creation.
    fn alive(&self) -> Vec<(usize, Object)> {
        let mut alive: Vec<_> = self
            .objects
            .iter()
            .filter_map(|(&o, _)| match self.state(o)?.life {
                Life::Alive { created_at } => Some((created_at, o)),
                _ => None,
            })
            .collect();
        alive.sort();
        alive
    }

    fn run(remembered: usize, ops: &[TraceOp]) -> Vec<(usize, Said)> {
        let mut model = Model {
            remembered,
            objects: BTreeMap::new(),
            destroys: [Vec::new(), Vec::new()],
            forgot_any: [false; 2],
            exited: false,
            said: Vec::new(),
        };
        for (at, op) in ops.iter().enumerate() {
            if model.exited {
                model.said.push((at, Said::CallAfterExit));
                continue;
            }
            match *op {
                TraceOp::CreateStream { stream, device } => {
                    model.create(at, (true, stream.0), device.0, false)
                }
                TraceOp::DefaultStream { stream, device } => {
                    model.create(at, (true, stream.0), device.0, true)
                }
                TraceOp::CreateEvent { event, device } => {
                    model.create(at, (false, event.0), device.0, false)
                }
                TraceOp::DestroyStream { stream } => model.destroy(at, (true, stream.0)),
                TraceOp::DestroyEvent { event } => model.destroy(at, (false, event.0)),
                TraceOp::Record { event, stream } => {
                    let e = model.use_object(at, (false, event.0));
                    let s = model.use_object(at, (true, stream.0));
                    if let (Some(e), Some(s)) = (e, s)
                        && e.device != s.device
                    {
                        let said = Said::RecordOnOtherDevice(event.0, e.device, stream.0, s.device);
                        model.said.push((at, said));
                    }
                    if e.is_some() {
                        model.objects.get_mut(&(false, event.0)).unwrap().recorded = true;
                    }
                }
                TraceOp::Wait { stream, event } => {
                    model.use_object(at, (true, stream.0));
                    model.wait_on(at, event.0);
                }
                TraceOp::SynchronizeEvent { event } => model.wait_on(at, event.0),
                TraceOp::QueryEvent { event } => {
                    model.use_object(at, (false, event.0));
                }
                TraceOp::SynchronizeStream { stream }
                | TraceOp::QueryStream { stream }
                | TraceOp::PeerCopy { stream, .. } => {
                    model.use_object(at, (true, stream.0));
                }
                TraceOp::Launch { stream, device } => {
                    if let (Some(s), Some(device)) =
                        (model.use_object(at, (true, stream.0)), device)
                        && s.device != device.0
                    {
                        let said = Said::StreamOnOtherDevice(stream.0, s.device, device.0);
                        model.said.push((at, said));
                    }
                }
                TraceOp::Exit => {
                    for (created_at, o) in model.alive() {
                        model.said.push((created_at, Said::AliveAtExit(o)));
                    }
                    model.exited = true;
                }
                // The memory calls (never generated here) use the stream they name.
                _ => {
                    if let Some(stream) = op.memory_stream() {
                        model.use_object(at, (true, stream.0));
                    }
                }
            }
        }
        if !model.exited {
            for (created_at, o) in model.alive() {
                model.said.push((created_at, Said::Leaked(o)));
            }
        }
        model.said
    }
}

/// The checker's findings on `ops`, as the model says them.
fn checked(remembered: usize, ops: &[TraceOp]) -> Vec<(usize, Said)> {
    let mut checker = Checker::remembering(remembered);
    let mut found = Vec::new();
    for (position, op) in ops.iter().enumerate() {
        checker.step(position, op, &mut |f| found.push(said(f, remembered)));
    }
    checker.finish(&mut |f| found.push(said(f, remembered)));
    found
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The checker reports what the model reports, finding for finding, in order.
    #[test]
    fn the_checker_agrees_with_the_model(
        calls in prop::collection::vec(call(), 0..80),
        remembered in 0usize..5,
    ) {
        let ops: Vec<TraceOp> = calls.iter().map(Call::op).collect();
        prop_assert_eq!(checked(remembered, &ops), Model::run(remembered, &ops));
    }

    /// Streamed as text, in pieces, the calls (up to an exit: the format allows nothing after
    /// it) give the in-memory checker's defects, message for message, and the streaming
    /// checker holds a name for each object it tracks and no more.
    #[test]
    fn streaming_agrees_with_the_in_memory_checker(
        calls in prop::collection::vec(call(), 0..80),
        remembered in 0usize..5,
        piece in 1usize..8,
    ) {
        let mut ops: Vec<TraceOp> = calls.iter().map(Call::op).collect();
        if let Some(exit) = ops.iter().position(|op| *op == TraceOp::Exit) {
            ops.truncate(exit + 1);
        }
        let text = write_trace(&ops);
        let parsed = parse_trace(&text).unwrap();
        let mut checker = Checker::remembering(remembered);
        let mut expected = Vec::new();
        let mut keep = |finding| {
            if let Finding::Defect(defect) = finding {
                expected.push(parsed.describe(&defect).to_string());
            }
        };
        for (position, op) in parsed.ops.iter().enumerate() {
            checker.step(position, op, &mut keep);
        }
        checker.finish(&mut keep);

        let mut streaming = StreamingChecker::remembering(remembered);
        let mut printed = Vec::new();
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        for group in lines.chunks(piece) {
            streaming
                .check_text(group.concat().as_bytes(), &mut |report| {
                    if let Finding::Defect(_) = report.finding() {
                        printed.push(report.to_string());
                    }
                })
                .unwrap();
            prop_assert_eq!(streaming.names_held(), streaming.tracked());
        }
        streaming.finish(&mut |report| {
            if let Finding::Defect(_) = report.finding() {
                printed.push(report.to_string());
            }
        });
        prop_assert_eq!(printed, expected);
    }
}
