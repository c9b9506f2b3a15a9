//! What-if replay of an allocation trace through the allocator policy, without a GPU: the
//! trace's line format, a driver that models no device, and one trace under several settings.
//!
//! [`Replay`] is here; `parse` reads the line format (docs/alloc-trace-format.md), `driver` is
//! the [`ReplayDriver`]. The trace is fed line by line: memory is bounded by the allocations
//! live at once (times the configurations), not by the trace's length. Work is taken as
//! complete at once (every event complete when asked), so frees on other streams are reusable
//! at the next request, as on a device that keeps up with its host.

mod driver;
mod parse;
#[cfg(test)]
mod tests;

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use hashbrown::{HashMap, HashSet};

use super::{
    AllocRequest, AllocatorCapabilities, AllocatorConfig, AllocatorStats, BlockHandle,
    DeviceAllocator, KindSupport, MemoryKind, Release,
};
use crate::error::{Error, Result};
use crate::id::{DeviceId, StreamId};
pub use driver::ReplayDriver;
pub use parse::{TRACE_HEADER, TraceEvent, parse_line};

/// The mapping granularity the replay's driver offers growable segments (CUDA's for device
/// memory on current GPUs).
pub const GRANULARITY: usize = 2 << 20;

/// Devices are numbered below this in a replayed trace.
pub const MAX_DEVICES: u32 = 1024;

/// A configuration to replay under, and the name it is reported by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayConfig {
    /// Its name in the report.
    pub name: String,
    /// The allocator's settings.
    pub allocator: AllocatorConfig,
}

/// The first request that failed under the cap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Its line in the trace.
    pub line: usize,
    /// The allocation's number.
    pub id: u64,
    /// Its device.
    pub device: u32,
    /// Bytes asked for.
    pub size: u64,
    /// Bytes the device's pool held from the driver when it failed.
    pub reserved: usize,
    /// Bytes of the device's pool handed out when it failed.
    pub allocated: usize,
}

/// What one configuration's replay found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayReport {
    /// The configuration's name.
    pub name: String,
    /// Device memory statistics of each device the trace used, by device number.
    pub devices: Vec<(DeviceId, AllocatorStats)>,
    /// The first request that failed under the cap, if one did.
    pub first_failure: Option<Failure>,
    /// Requests that failed under the cap (their frees are skipped).
    pub failures: u64,
}

/// A live allocation in one configuration's replay.
#[derive(Clone, Copy)]
struct Live {
    device: u32,
    stream: Option<u32>,
    handle: BlockHandle,
}

/// One configuration's allocators and live allocations.
struct Run {
    name: String,
    config: AllocatorConfig,
    devices: Vec<Option<(DeviceAllocator, ReplayDriver)>>,
    live: HashMap<u64, Live>,
    failed: HashSet<u64>,
    first_failure: Option<Failure>,
    failures: u64,
}

/// Replays one trace under several configurations side by side.
pub struct Replay {
    runs: Vec<Run>,
    /// The lowest `max_streams` of the configurations: streams are numbered below it.
    stream_limit: usize,
    cap: usize,
    lines: usize,
    events: u64,
}

/// What the replay's device offers: device memory with a stream-ordered form (as CUDA's).
const CAPABILITIES: AllocatorCapabilities = AllocatorCapabilities {
    device: KindSupport::STREAM_ORDERED,
    managed: KindSupport::NONE,
    host_pinned: KindSupport::NONE,
    host_register: false,
};

impl Replay {
    /// A replay under `configs` (none: the default settings, named `default`), each device
    /// holding at most `cap` bytes from the driver (`None`: no cap).
    pub fn new(configs: Vec<ReplayConfig>, cap: Option<usize>) -> Self {
        let configs = if configs.is_empty() {
            alloc::vec![ReplayConfig {
                name: "default".into(),
                allocator: AllocatorConfig::default(),
            }]
        } else {
            configs
        };
        let runs = configs
            .into_iter()
            .map(|c| Run {
                name: c.name,
                config: c.allocator,
                devices: Vec::new(),
                live: HashMap::new(),
                failed: HashSet::new(),
                first_failure: None,
                failures: 0,
            })
            .collect::<Vec<Run>>();
        let stream_limit = runs.iter().map(|r| r.config.max_streams).min().unwrap_or(0);
        Self {
            runs,
            stream_limit,
            cap: cap.unwrap_or(usize::MAX),
            lines: 0,
            events: 0,
        }
    }

    /// Reads the next line of the trace (without its line end) and replays its event. A bad
    /// line is an error naming it and its field, and changes nothing.
    #[inline]
    pub fn feed_line(&mut self, text: &[u8]) -> Result<()> {
        self.lines += 1;
        match parse_line(text, self.lines)? {
            Some(event) => self.apply(&event, self.lines),
            None => Ok(()),
        }
    }

    /// Replays one event of trace line `line` under every configuration. An event the trace
    /// cannot hold there (a free or use of an allocation not live, an allocation whose number
    /// is live, a device or stream beyond the limits) is an error and changes nothing.
    pub fn apply(&mut self, event: &TraceEvent, line: usize) -> Result<()> {
        self.check(event, line)?;
        for run in &mut self.runs {
            run.apply(event, line, self.cap)?;
        }
        self.events += 1;
        Ok(())
    }

    /// Events replayed so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Lines read so far.
    pub fn lines(&self) -> usize {
        self.lines
    }

    /// Each configuration's figures, in the order given.
    pub fn finish(self) -> Vec<ReplayReport> {
        self.runs.into_iter().map(Run::report).collect()
    }

    /// Whether `event` fits the trace so far (every configuration agrees on which allocations
    /// are live or failed, so the first one answers).
    fn check(&self, event: &TraceEvent, line: usize) -> Result<()> {
        let run = &self.runs[0];
        let (id, stream, fresh) = match *event {
            TraceEvent::Alloc {
                id, device, stream, ..
            } => {
                if device >= MAX_DEVICES {
                    return Err(refused(line, "`device`: below 1024", device));
                }
                (id, stream, true)
            }
            TraceEvent::Free { id, stream } => (id, stream.flatten(), false),
            TraceEvent::Use { id, stream } => (id, Some(stream), false),
        };
        let known = run.live.contains_key(&id) || run.failed.contains(&id);
        if fresh && known {
            return Err(refused(
                line,
                "`id`: a number not live (freed before it is used again)",
                id,
            ));
        }
        if !fresh && !known {
            return Err(refused(line, "`id`: a live allocation", id));
        }
        match stream {
            Some(stream) if stream as usize >= self.stream_limit => Err(refused(
                line,
                "`stream`: below the allocator's max_streams",
                stream,
            )),
            _ => Ok(()),
        }
    }
}

/// The error for a line whose field held `found` where `expected` was needed.
fn refused(line: usize, expected: &'static str, found: impl core::fmt::Display) -> Error {
    Error::TraceSyntax {
        line,
        expected,
        found: format!("{found}"),
    }
}

impl Run {
    fn apply(&mut self, event: &TraceEvent, line: usize, cap: usize) -> Result<()> {
        match *event {
            TraceEvent::Alloc {
                id,
                device,
                stream,
                size,
            } => self.allocate(id, device, stream, size, line, cap),
            TraceEvent::Free { id, stream } => {
                let Some(live) = self.live.remove(&id) else {
                    self.failed.remove(&id);
                    return Ok(());
                };
                let release = match stream.unwrap_or(live.stream) {
                    Some(stream) => Release::OnStream(StreamId(stream)),
                    None => Release::Idle,
                };
                match self.device(live.device) {
                    Some((allocator, driver)) => allocator.free(driver, live.handle, release),
                    None => Ok(()),
                }
            }
            TraceEvent::Use { id, stream } => {
                let Some(&live) = self.live.get(&id) else {
                    return Ok(());
                };
                match self.device(live.device) {
                    Some((allocator, _)) => allocator.mark_used_on(live.handle, StreamId(stream)),
                    None => Ok(()),
                }
            }
        }
    }

    fn allocate(
        &mut self,
        id: u64,
        device: u32,
        stream: Option<u32>,
        size: u64,
        line: usize,
        cap: usize,
    ) -> Result<()> {
        let bytes = usize::try_from(size).map_err(|_| Error::TraceSyntax {
            line,
            expected: "`size`: a byte count this machine can address",
            found: format!("{size}"),
        })?;
        let mut request = AllocRequest::new(MemoryKind::Device, bytes);
        if let Some(stream) = stream {
            request = request.on_stream(StreamId(stream), &[]);
        }
        if self.devices.len() <= device as usize {
            self.devices.resize_with(device as usize + 1, || None);
        }
        let config = self.config;
        let (allocator, driver) = self.devices[device as usize].get_or_insert_with(|| {
            let driver = ReplayDriver::new(cap);
            (
                DeviceAllocator::new(DeviceId(device), CAPABILITIES, config),
                match config.growable_segments {
                    true => driver.with_granularity(GRANULARITY),
                    false => driver,
                },
            )
        });
        match allocator.allocate(driver, &request) {
            Ok(allocation) => {
                self.live.insert(
                    id,
                    Live {
                        device,
                        stream,
                        handle: allocation.handle,
                    },
                );
                Ok(())
            }
            Err(Error::OutOfMemory {
                reserved,
                allocated,
                ..
            }) => {
                self.failures += 1;
                self.failed.insert(id);
                self.first_failure.get_or_insert(Failure {
                    line,
                    id,
                    device,
                    size,
                    reserved,
                    allocated,
                });
                Ok(())
            }
            Err(error) => Err(Error::TraceSyntax {
                line,
                expected: "a request the allocator accepts",
                found: format!("{error}"),
            }),
        }
    }

    /// The allocator and driver of a device that has had an allocation (every live one's).
    fn device(&mut self, device: u32) -> Option<(&mut DeviceAllocator, &mut ReplayDriver)> {
        let (allocator, driver) = self.devices.get_mut(device as usize)?.as_mut()?;
        Some((allocator, driver))
    }

    fn report(self) -> ReplayReport {
        let devices = self
            .devices
            .iter()
            .enumerate()
            .filter_map(|(number, slot)| {
                slot.as_ref()
                    .map(|(a, _)| (DeviceId(number as u32), a.stats(MemoryKind::Device)))
            })
            .collect();
        ReplayReport {
            name: self.name,
            devices,
            first_failure: self.first_failure,
            failures: self.failures,
        }
    }
}
