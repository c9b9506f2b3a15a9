//! One recorded driver call as plain data (`Call`): what CUPTI's callback said, with the
//! handles and memory footprint read out of its parameters, and its one-line text form (the
//! recorded fixtures).

use core::fmt;

use crate::sys;

/// What kind of call a driver function is, for the translation (its handles aside).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Creates a stream (`cuStreamCreate`, `cuStreamCreateWithPriority`, ...).
    StreamCreate,
    /// Destroys a stream.
    StreamDestroy,
    /// Creates an event (`cuEventCreate`, `cuIpcOpenEventHandle`).
    EventCreate,
    /// Destroys an event.
    EventDestroy,
    /// Records an event on a stream (`cuEventRecord`, `cuEventRecordWithFlags`, ...).
    EventRecord,
    /// Makes a stream wait for an event.
    StreamWaitEvent,
    /// The host waits for a stream.
    StreamSynchronize,
    /// The host asks whether a stream is idle.
    StreamQuery,
    /// The host waits for an event.
    EventSynchronize,
    /// The host asks whether an event has completed.
    EventQuery,
    /// Stream-ordered work: a kernel, a graph, an asynchronous copy, fill, allocation or free.
    Work,
    /// A stream begins capturing into a CUDA graph.
    BeginCapture,
    /// A stream's capture ends.
    EndCapture,
    /// A kernel launch on a stream (`cuLaunchKernel`, `cuLaunchKernelEx`, cooperative).
    Launch,
    /// An asynchronous copy on a stream (`cuMemcpyAsync`, `cuMemcpyHtoDAsync_v2`, peer, ...).
    Copy,
    /// A synchronous copy, on the null stream (`cuMemcpy`, `cuMemcpyDtoH_v2`, ...).
    CopySync,
    /// An asynchronous fill on a stream (`cuMemsetD8Async`, ...).
    Fill,
    /// A synchronous fill, on the null stream (`cuMemsetD32_v2`, ...).
    FillSync,
    /// An allocation not ordered on a stream (`cuMemAlloc_v2`, `cuMemAllocManaged`, pinned host).
    Alloc,
    /// A stream-ordered allocation (`cuMemAllocAsync`, `cuMemAllocFromPoolAsync`).
    AllocAsync,
    /// A free that waits for the device (`cuMemFree_v2`, `cuMemFreeHost`).
    Free,
    /// A stream-ordered free (`cuMemFreeAsync`).
    FreeAsync,
    /// Our runtime's allocator handed out a block for a stream (reported by our plug-in).
    BlockAlloc,
    /// Our runtime's allocator took a block back into a stream's pool.
    BlockFree,
    /// A block is used on another stream too (PyTorch's `record_stream`).
    BlockUse,
    /// A memory or context call the trace keeps as a comment.
    Note,
}

/// A call's handles, by shape. Handles are the driver's raw values (`CUstream`, `CUevent`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `stream` was created (0 when the call failed).
    StreamCreate {
        /// The new stream.
        stream: u64,
        /// Its creation flags (`CU_STREAM_NON_BLOCKING` is 1).
        flags: u32,
    },
    /// `stream` is destroyed.
    StreamDestroy {
        /// The stream.
        stream: u64,
    },
    /// `event` was created (0 when the call failed).
    EventCreate {
        /// The new event.
        event: u64,
    },
    /// `event` is destroyed.
    EventDestroy {
        /// The event.
        event: u64,
    },
    /// `event` recorded on `stream`.
    EventRecord {
        /// The event.
        event: u64,
        /// The stream.
        stream: u64,
    },
    /// `stream` waits for `event`.
    StreamWaitEvent {
        /// The stream.
        stream: u64,
        /// The event.
        event: u64,
    },
    /// The host waits for `stream`.
    StreamSynchronize {
        /// The stream.
        stream: u64,
    },
    /// The host asks whether `stream` is idle.
    StreamQuery {
        /// The stream.
        stream: u64,
    },
    /// The host waits for `event`.
    EventSynchronize {
        /// The event.
        event: u64,
    },
    /// The host asks whether `event` has completed.
    EventQuery {
        /// The event.
        event: u64,
    },
    /// Work enqueued on `stream`.
    Work {
        /// The stream.
        stream: u64,
    },
    /// `stream` begins capturing.
    BeginCapture {
        /// The stream.
        stream: u64,
    },
    /// `stream`'s capture ends.
    EndCapture {
        /// The stream.
        stream: u64,
    },
    /// `function` launched on `stream`; its parameters' words are the call's [`Call::args`].
    Launch {
        /// The stream.
        stream: u64,
        /// The `CUfunction` or `CUkernel` handle.
        function: u64,
    },
    /// `bytes` copied from `src` to `dst` on `stream` (0 bytes: footprint unknown).
    Copy {
        /// The stream.
        stream: u64,
        /// The destination address (device or host).
        dst: u64,
        /// The source address (device or host).
        src: u64,
        /// The length.
        bytes: u64,
    },
    /// `bytes` copied from `src` to `dst` on the null stream.
    CopySync {
        /// The destination address.
        dst: u64,
        /// The source address.
        src: u64,
        /// The length.
        bytes: u64,
    },
    /// `bytes` from `dst` filled on `stream` (0 bytes: footprint unknown).
    Fill {
        /// The stream.
        stream: u64,
        /// The first address.
        dst: u64,
        /// The length in bytes (elements times their size).
        bytes: u64,
    },
    /// `bytes` from `dst` filled on the null stream.
    FillSync {
        /// The first address.
        dst: u64,
        /// The length in bytes.
        bytes: u64,
    },
    /// `bytes` allocated at `address` (0 when the call failed).
    Alloc {
        /// The new allocation's address.
        address: u64,
        /// Its length.
        bytes: u64,
    },
    /// `bytes` allocated at `address` in `stream`'s order (0 when the call failed).
    AllocAsync {
        /// The stream.
        stream: u64,
        /// The new allocation's address.
        address: u64,
        /// Its length.
        bytes: u64,
    },
    /// The allocation at `address` freed.
    Free {
        /// The address.
        address: u64,
    },
    /// The allocation at `address` freed in `stream`'s order.
    FreeAsync {
        /// The stream.
        stream: u64,
        /// The address.
        address: u64,
    },
    /// Our runtime's allocator handed out `bytes` at `address` for `stream`.
    BlockAlloc {
        /// The stream.
        stream: u64,
        /// The block's first byte.
        address: u64,
        /// Its length.
        bytes: u64,
    },
    /// The block at `address` went back into `stream`'s pool.
    BlockFree {
        /// The stream.
        stream: u64,
        /// The block's first byte.
        address: u64,
    },
    /// The block at `address` is used on `stream` too.
    BlockUse {
        /// The stream.
        stream: u64,
        /// The block's first byte.
        address: u64,
    },
    /// A memory or context call, kept as a comment.
    Note,
}

/// The values of a call's text form, by key (`stream=`, `dst=`, ...): what [`Kind::fields`]
/// gives and [`Kind::from_shape`] takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fields {
    /// `stream=`: a stream handle.
    pub stream: Option<u64>,
    /// `event=`: an event handle.
    pub event: Option<u64>,
    /// `func=`: a launched function's handle.
    pub function: Option<u64>,
    /// `dst=`: a destination address.
    pub dst: Option<u64>,
    /// `src=`: a source address.
    pub src: Option<u64>,
    /// `addr=`: an allocation's address.
    pub address: Option<u64>,
    /// `bytes=`: a length.
    pub bytes: Option<u64>,
    /// `flags=`: a stream's creation flags.
    pub flags: Option<u32>,
}

impl Kind {
    /// The shape of this kind.
    pub fn shape(self) -> Shape {
        match self {
            Self::StreamCreate { .. } => Shape::StreamCreate,
            Self::StreamDestroy { .. } => Shape::StreamDestroy,
            Self::EventCreate { .. } => Shape::EventCreate,
            Self::EventDestroy { .. } => Shape::EventDestroy,
            Self::EventRecord { .. } => Shape::EventRecord,
            Self::StreamWaitEvent { .. } => Shape::StreamWaitEvent,
            Self::StreamSynchronize { .. } => Shape::StreamSynchronize,
            Self::StreamQuery { .. } => Shape::StreamQuery,
            Self::EventSynchronize { .. } => Shape::EventSynchronize,
            Self::EventQuery { .. } => Shape::EventQuery,
            Self::Work { .. } => Shape::Work,
            Self::BeginCapture { .. } => Shape::BeginCapture,
            Self::EndCapture { .. } => Shape::EndCapture,
            Self::Launch { .. } => Shape::Launch,
            Self::Copy { .. } => Shape::Copy,
            Self::CopySync { .. } => Shape::CopySync,
            Self::Fill { .. } => Shape::Fill,
            Self::FillSync { .. } => Shape::FillSync,
            Self::Alloc { .. } => Shape::Alloc,
            Self::AllocAsync { .. } => Shape::AllocAsync,
            Self::Free { .. } => Shape::Free,
            Self::FreeAsync { .. } => Shape::FreeAsync,
            Self::BlockAlloc { .. } => Shape::BlockAlloc,
            Self::BlockFree { .. } => Shape::BlockFree,
            Self::BlockUse { .. } => Shape::BlockUse,
            Self::Note => Shape::Note,
        }
    }

    /// The stream handle this call names, if any.
    pub fn stream(self) -> Option<u64> {
        match self {
            Self::StreamCreate { stream, .. }
            | Self::StreamDestroy { stream }
            | Self::EventRecord { stream, .. }
            | Self::StreamWaitEvent { stream, .. }
            | Self::StreamSynchronize { stream }
            | Self::StreamQuery { stream }
            | Self::Work { stream }
            | Self::BeginCapture { stream }
            | Self::EndCapture { stream }
            | Self::Launch { stream, .. }
            | Self::Copy { stream, .. }
            | Self::Fill { stream, .. }
            | Self::AllocAsync { stream, .. }
            | Self::FreeAsync { stream, .. }
            | Self::BlockAlloc { stream, .. }
            | Self::BlockFree { stream, .. }
            | Self::BlockUse { stream, .. } => Some(stream),
            _ => None,
        }
    }

    /// The event handle this call names, if any.
    pub fn event(self) -> Option<u64> {
        match self {
            Self::EventCreate { event }
            | Self::EventDestroy { event }
            | Self::EventRecord { event, .. }
            | Self::StreamWaitEvent { event, .. }
            | Self::EventSynchronize { event }
            | Self::EventQuery { event } => Some(event),
            _ => None,
        }
    }

    /// The values of its text form's keys (a handle or footprint it does not have is `None`).
    pub fn fields(self) -> Fields {
        let mut fields = Fields {
            stream: self.stream(),
            event: self.event(),
            ..Fields::default()
        };
        match self {
            Self::StreamCreate { flags, .. } => fields.flags = Some(flags),
            Self::Launch { function, .. } => fields.function = Some(function),
            Self::Copy {
                dst, src, bytes, ..
            }
            | Self::CopySync { dst, src, bytes } => {
                (fields.dst, fields.src, fields.bytes) = (Some(dst), Some(src), Some(bytes));
            }
            Self::Fill { dst, bytes, .. } | Self::FillSync { dst, bytes } => {
                (fields.dst, fields.bytes) = (Some(dst), Some(bytes));
            }
            Self::Alloc { address, bytes }
            | Self::AllocAsync { address, bytes, .. }
            | Self::BlockAlloc { address, bytes, .. } => {
                (fields.address, fields.bytes) = (Some(address), Some(bytes));
            }
            Self::Free { address }
            | Self::FreeAsync { address, .. }
            | Self::BlockFree { address, .. }
            | Self::BlockUse { address, .. } => {
                fields.address = Some(address);
            }
            _ => {}
        }
        fields
    }

    /// The kind of `shape` with these fields; `None` for a shape that needs a handle it was not
    /// given. A missing footprint is 0 (unknown: calls recorded before footprints were).
    pub fn from_shape(shape: Shape, fields: Fields) -> Option<Self> {
        let Fields {
            stream,
            event,
            function,
            dst,
            src,
            address,
            bytes,
            flags,
        } = fields;
        let (dst, src, address, bytes) = (
            dst.unwrap_or(0),
            src.unwrap_or(0),
            address.unwrap_or(0),
            bytes.unwrap_or(0),
        );
        Some(match shape {
            Shape::StreamCreate => Self::StreamCreate {
                stream: stream?,
                flags: flags.unwrap_or(0),
            },
            Shape::StreamDestroy => Self::StreamDestroy { stream: stream? },
            Shape::EventCreate => Self::EventCreate { event: event? },
            Shape::EventDestroy => Self::EventDestroy { event: event? },
            Shape::EventRecord => Self::EventRecord {
                event: event?,
                stream: stream?,
            },
            Shape::StreamWaitEvent => Self::StreamWaitEvent {
                stream: stream?,
                event: event?,
            },
            Shape::StreamSynchronize => Self::StreamSynchronize { stream: stream? },
            Shape::StreamQuery => Self::StreamQuery { stream: stream? },
            Shape::EventSynchronize => Self::EventSynchronize { event: event? },
            Shape::EventQuery => Self::EventQuery { event: event? },
            Shape::Work => Self::Work { stream: stream? },
            Shape::BeginCapture => Self::BeginCapture { stream: stream? },
            Shape::EndCapture => Self::EndCapture { stream: stream? },
            Shape::Launch => Self::Launch {
                stream: stream?,
                function: function.unwrap_or(0),
            },
            Shape::Copy => Self::Copy {
                stream: stream?,
                dst,
                src,
                bytes,
            },
            Shape::CopySync => Self::CopySync { dst, src, bytes },
            Shape::Fill => Self::Fill {
                stream: stream?,
                dst,
                bytes,
            },
            Shape::FillSync => Self::FillSync { dst, bytes },
            Shape::Alloc => Self::Alloc { address, bytes },
            Shape::AllocAsync => Self::AllocAsync {
                stream: stream?,
                address,
                bytes,
            },
            Shape::Free => Self::Free { address },
            Shape::FreeAsync => Self::FreeAsync {
                stream: stream?,
                address,
            },
            Shape::BlockAlloc => Self::BlockAlloc {
                stream: stream?,
                address,
                bytes,
            },
            Shape::BlockFree => Self::BlockFree {
                stream: stream?,
                address,
            },
            Shape::BlockUse => Self::BlockUse {
                stream: stream?,
                address,
            },
            Shape::Note => Self::Note,
        })
    }
}

/// Where the call was when it was recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Before the driver ran it (destroys are recorded then, before the handle can be reused).
    Entered,
    /// After the driver returned this `CUresult`.
    Returned(u32),
}

/// One driver call seen by the recorder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// The driver function as CUPTI names its callback (`cuLaunchKernel_ptsz`).
    pub function: &'static str,
    /// Its handles.
    pub kind: Kind,
    /// The calling thread's current context (0 if none).
    pub context: u64,
    /// That context's device, if known.
    pub device: Option<u32>,
    /// The calling thread (the kernel's thread id).
    pub thread: u64,
    /// Before or after the driver ran it.
    pub outcome: Outcome,
    /// A launch's parameters as the 8-byte words that may be addresses (`inject` says which
    /// words it reads); empty for other calls, or where the parameters' sizes are unknown.
    pub args: Vec<u64>,
}

impl Call {
    /// Whether the function is a per-thread-default-stream form (`_ptsz`, `_ptds`): its null
    /// stream is the calling thread's default stream, not the context's legacy one.
    pub fn per_thread(&self) -> bool {
        self.function.ends_with("_ptsz") || self.function.ends_with("_ptds")
    }
}

/// Every driver function the recorder subscribes to: CUPTI's callback id, the name, the shape.
pub static RECORDED_FUNCTIONS: &[(u32, &str, Shape)] = &recorded_functions();

const fn recorded_functions() -> [(u32, &'static str, Shape); FUNCTION_COUNT] {
    macro_rules! rows {
        ($(($name:ident, $cbid:ident, $params:ident, $kind:ident, [$($field:ident),*])),* $(,)?) => {
            [$((sys::$cbid, stringify!($name), shape_of!($kind)),)*]
        };
    }
    macro_rules! note_rows {
        ($(($name:ident, $cbid:ident)),* $(,)?) => {
            [$((sys::$cbid, stringify!($name), Shape::Note),)*]
        };
    }
    let recorded = sys::recorded_calls!(rows);
    let noted = sys::noted_calls!(note_rows);
    let mut all = [(0, "", Shape::Note); FUNCTION_COUNT];
    let mut i = 0;
    while i < recorded.len() {
        all[i] = recorded[i];
        i += 1;
    }
    let mut j = 0;
    while j < noted.len() {
        all[i + j] = noted[j];
        j += 1;
    }
    all
}

/// The shape a kind name of the generated table stands for.
macro_rules! shape_of {
    (stream_create) => {
        Shape::StreamCreate
    };
    (stream_destroy) => {
        Shape::StreamDestroy
    };
    (event_create) => {
        Shape::EventCreate
    };
    (event_destroy) => {
        Shape::EventDestroy
    };
    (event_record) => {
        Shape::EventRecord
    };
    (stream_wait_event) => {
        Shape::StreamWaitEvent
    };
    (stream_synchronize) => {
        Shape::StreamSynchronize
    };
    (stream_query) => {
        Shape::StreamQuery
    };
    (event_synchronize) => {
        Shape::EventSynchronize
    };
    (event_query) => {
        Shape::EventQuery
    };
    (work) => {
        Shape::Work
    };
    (work_config) => {
        Shape::Work
    };
    (work_each) => {
        Shape::Work
    };
    (begin_capture) => {
        Shape::BeginCapture
    };
    (end_capture) => {
        Shape::EndCapture
    };
    (launch) => {
        Shape::Launch
    };
    (launch_extra) => {
        Shape::Launch
    };
    (launch_config) => {
        Shape::Launch
    };
    (copy) => {
        Shape::Copy
    };
    (copy_sync) => {
        Shape::CopySync
    };
    (fill) => {
        Shape::Fill
    };
    (fill_sync) => {
        Shape::FillSync
    };
    (alloc) => {
        Shape::Alloc
    };
    (alloc_async) => {
        Shape::AllocAsync
    };
    (free) => {
        Shape::Free
    };
    (free_async) => {
        Shape::FreeAsync
    };
}
pub(crate) use shape_of;

const FUNCTION_COUNT: usize = {
    macro_rules! count {
        ($($row:tt),* $(,)?) => {
            [$(count!(@one $row)),*].len()
        };
        (@one $row:tt) => {
            ()
        };
    }
    sys::recorded_calls!(count) + sys::noted_calls!(count)
};

/// The block events sub-allocators report through `gpu_recorder_block` (no driver call): their
/// names in the calls file, and shapes; three per allocator, in the hook's allocator order (our
/// runtime's plug-ins `gpurt`, PyTorch's caching allocator `torch` through the recorder's
/// tracker shim, NVTX memory regions `nvtx`, our runtime's buffers `gpurt_region` through its
/// backend's `note_buffer`). The name before `_block_` is the allocator.
pub static BLOCK_FUNCTIONS: [(&str, Shape); 12] = [
    ("gpurt_block_alloc", Shape::BlockAlloc),
    ("gpurt_block_free", Shape::BlockFree),
    ("gpurt_block_use", Shape::BlockUse),
    ("torch_block_alloc", Shape::BlockAlloc),
    ("torch_block_free", Shape::BlockFree),
    ("torch_block_use", Shape::BlockUse),
    ("nvtx_block_alloc", Shape::BlockAlloc),
    ("nvtx_block_free", Shape::BlockFree),
    ("nvtx_block_use", Shape::BlockUse),
    ("gpurt_region_block_alloc", Shape::BlockAlloc),
    ("gpurt_region_block_free", Shape::BlockFree),
    ("gpurt_region_block_use", Shape::BlockUse),
];

/// A launch's footprint announced through `gpu_recorder_block` (event 3, by our runtime's
/// backends): its begin (`addr=` the kernel's function) then each range, read, written or
/// both, in the hook's access order; all of the shape of a block's hand-out (`stream=` the
/// launch's stream).
pub static FOOTPRINT_FUNCTIONS: [(&str, Shape); 4] = [
    ("gpurt_footprint_begin", Shape::BlockAlloc),
    ("gpurt_footprint_r", Shape::BlockAlloc),
    ("gpurt_footprint_w", Shape::BlockAlloc),
    ("gpurt_footprint_rw", Shape::BlockAlloc),
];

/// The name and shape of a recorded function (or block event, or footprint), by name.
pub fn function_named(name: &str) -> Option<(&'static str, Shape)> {
    RECORDED_FUNCTIONS
        .iter()
        .map(|&(_, name, shape)| (name, shape))
        .chain(BLOCK_FUNCTIONS)
        .chain(FOOTPRINT_FUNCTIONS)
        .find(|&(known, _)| known == name)
}

/// The text form: `FUNCTION ctx=0xC dev=D tid=T ret=R [stream=0xS] [event=0xE] [func=0xF]
/// [dst=0xD] [src=0xS] [addr=0xA] [bytes=N] [flags=0xF] [args=0xW,0xW...]`, with `dev=-` for an unknown
/// device and `ret=enter` for a call recorded before it ran; a footprint value of 0 (unknown)
/// is left out.
impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ctx={:#x} dev=", self.function, self.context)?;
        match self.device {
            Some(device) => write!(f, "{device}")?,
            None => f.write_str("-")?,
        }
        write!(f, " tid={} ret=", self.thread)?;
        match self.outcome {
            Outcome::Entered => f.write_str("enter")?,
            Outcome::Returned(code) => write!(f, "{code}")?,
        }
        let fields = self.kind.fields();
        for (key, value) in [("stream", fields.stream), ("event", fields.event)] {
            if let Some(value) = value {
                write!(f, " {key}={value:#x}")?;
            }
        }
        // A footprint value of 0 is unknown, which is what a missing key reads back as.
        for (key, value) in [
            ("func", fields.function),
            ("dst", fields.dst),
            ("src", fields.src),
            ("addr", fields.address),
        ] {
            if let Some(value) = value.filter(|&value| value != 0) {
                write!(f, " {key}={value:#x}")?;
            }
        }
        if let Some(bytes) = fields.bytes.filter(|&bytes| bytes != 0) {
            write!(f, " bytes={bytes}")?;
        }
        if let Some(flags) = fields.flags.filter(|&flags| flags != 0) {
            write!(f, " flags={flags:#x}")?;
        }
        for (i, word) in self.args.iter().enumerate() {
            let separator = if i == 0 { " args=" } else { "," };
            write!(f, "{separator}{word:#x}")?;
        }
        Ok(())
    }
}

/// A line of a calls file that is not a call.
#[derive(Debug, PartialEq, Eq)]
pub struct ParseCallError(pub String);

impl fmt::Display for ParseCallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseCallError {}

impl core::str::FromStr for Call {
    type Err = ParseCallError;

    /// Reads the text form back.
    fn from_str(line: &str) -> Result<Self, ParseCallError> {
        let error = |what: String| ParseCallError(format!("{what} in `{line}`"));
        let mut words = line.split_whitespace();
        let name = words.next().ok_or_else(|| error("no function".into()))?;
        let (function, shape) =
            function_named(name).ok_or_else(|| error(format!("unknown function {name}")))?;
        let (mut context, mut device, mut thread, mut outcome) = (None, None, None, None);
        let mut fields = Fields::default();
        let mut args = Vec::new();
        for word in words {
            let (key, value) = word
                .split_once('=')
                .ok_or_else(|| error(format!("`{word}` is not key=value")))?;
            let hex_of = |value: &str| {
                value
                    .strip_prefix("0x")
                    .and_then(|digits| u64::from_str_radix(digits, 16).ok())
                    .ok_or_else(|| error(format!("{key}={value} is not a 0x number")))
            };
            let hex = || hex_of(value);
            let decimal = || {
                value
                    .parse::<u64>()
                    .map_err(|_| error(format!("{key}={value} is not a number")))
            };
            match key {
                "ctx" => context = Some(hex()?),
                "dev" if value == "-" => device = Some(None),
                "dev" => {
                    let number = u32::try_from(decimal()?)
                        .map_err(|_| error(format!("dev={value} is too large")))?;
                    device = Some(Some(number));
                }
                "tid" => thread = Some(decimal()?),
                "ret" if value == "enter" => outcome = Some(Outcome::Entered),
                "ret" => {
                    let code = u32::try_from(decimal()?)
                        .map_err(|_| error(format!("ret={value} is too large")))?;
                    outcome = Some(Outcome::Returned(code));
                }
                "stream" => fields.stream = Some(hex()?),
                "event" => fields.event = Some(hex()?),
                "func" => fields.function = Some(hex()?),
                "dst" => fields.dst = Some(hex()?),
                "src" => fields.src = Some(hex()?),
                "addr" => fields.address = Some(hex()?),
                "bytes" => fields.bytes = Some(decimal()?),
                "flags" => {
                    let flags = u32::try_from(hex()?)
                        .map_err(|_| error(format!("flags={value} is too large")))?;
                    fields.flags = Some(flags);
                }
                "args" => {
                    args = value.split(',').map(hex_of).collect::<Result<_, _>>()?;
                }
                _ => return Err(error(format!("unknown key {key}"))),
            }
        }
        let missing = |what: &str| error(format!("no {what}="));
        let kind = Kind::from_shape(shape, fields)
            .ok_or_else(|| error(format!("{name} needs its stream= and event= handles")))?;
        Ok(Self {
            function,
            kind,
            context: context.ok_or_else(|| missing("ctx"))?,
            device: device.ok_or_else(|| missing("dev"))?,
            thread: thread.ok_or_else(|| missing("tid"))?,
            outcome: outcome.ok_or_else(|| missing("ret"))?,
            args,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_holds_each_function_once_with_its_callback_id() {
        for (i, (cbid, name, _)) in RECORDED_FUNCTIONS.iter().enumerate() {
            assert!(!name.is_empty());
            assert!(
                !RECORDED_FUNCTIONS[..i]
                    .iter()
                    .any(|(other_cbid, other, _)| other == name || other_cbid == cbid),
                "{name} ({cbid}) twice"
            );
        }
        assert_eq!(
            function_named("cuLaunchKernelEx_ptsz"),
            Some(("cuLaunchKernelEx_ptsz", Shape::Launch))
        );
        assert_eq!(
            function_named("cuEventRecordWithFlags"),
            Some(("cuEventRecordWithFlags", Shape::EventRecord))
        );
        assert_eq!(
            function_named("cuMemAlloc_v2"),
            Some(("cuMemAlloc_v2", Shape::Alloc))
        );
        assert_eq!(function_named("cuNothing"), None);
    }

    #[test]
    fn text_form_reads_back() {
        let calls = [
            Call {
                function: "cuEventRecordWithFlags_ptsz",
                kind: Kind::EventRecord {
                    event: 0xe1,
                    stream: 0,
                },
                context: 0x5555,
                device: Some(1),
                thread: 77,
                outcome: Outcome::Returned(0),
                args: Vec::new(),
            },
            Call {
                function: "cuStreamDestroy_v2",
                kind: Kind::StreamDestroy { stream: 0xabc },
                context: 0,
                device: None,
                thread: 1,
                outcome: Outcome::Entered,
                args: Vec::new(),
            },
            Call {
                function: "cuCtxSynchronize",
                kind: Kind::Note,
                context: 0x1,
                device: Some(0),
                thread: 2,
                outcome: Outcome::Returned(2),
                args: Vec::new(),
            },
        ];
        let footprints = [
            Call {
                function: "cuLaunchKernel_ptsz",
                kind: Kind::Launch {
                    stream: 0x10,
                    function: 0xf1,
                },
                context: 0x1,
                device: Some(0),
                thread: 2,
                outcome: Outcome::Returned(0),
                args: vec![0x7f00_0000_0000, 0x4000],
            },
            Call {
                function: "cuMemcpyDtoHAsync_v2",
                kind: Kind::Copy {
                    stream: 0x10,
                    dst: 0x5000,
                    src: 0x7f00_0000_0000,
                    bytes: 64,
                },
                context: 0x1,
                device: Some(0),
                thread: 2,
                outcome: Outcome::Returned(0),
                args: Vec::new(),
            },
            Call {
                function: "cuMemFreeAsync",
                kind: Kind::FreeAsync {
                    stream: 0x10,
                    address: 0x7f00_0000_0000,
                },
                context: 0x1,
                device: Some(0),
                thread: 2,
                outcome: Outcome::Entered,
                args: Vec::new(),
            },
        ];
        assert_eq!(
            footprints[0].to_string(),
            "cuLaunchKernel_ptsz ctx=0x1 dev=0 tid=2 ret=0 stream=0x10 func=0xf1 \
             args=0x7f0000000000,0x4000"
        );
        assert_eq!(
            footprints[1].to_string(),
            "cuMemcpyDtoHAsync_v2 ctx=0x1 dev=0 tid=2 ret=0 stream=0x10 dst=0x5000 \
             src=0x7f0000000000 bytes=64"
        );
        for call in calls.iter().chain(&footprints) {
            let text = call.to_string();
            assert_eq!(text.parse::<Call>().as_ref(), Ok(call), "{text}");
        }
        assert_eq!(
            calls[0].to_string(),
            "cuEventRecordWithFlags_ptsz ctx=0x5555 dev=1 tid=77 ret=0 stream=0x0 event=0xe1"
        );
    }

    #[test]
    fn malformed_lines_say_what_is_wrong() {
        let cases = [
            ("", "no function"),
            ("cuNothing ctx=0x1", "unknown function cuNothing"),
            (
                "cuLaunchKernel ctx=0x1 dev=0 tid=1 ret=0",
                "needs its stream= and event=",
            ),
            (
                "cuLaunchKernel ctx=1 dev=0 tid=1 ret=0 stream=0x1",
                "ctx=1 is not a 0x number",
            ),
            ("cuLaunchKernel dev=0 tid=1 ret=0 stream=0x1", "no ctx="),
            (
                "cuLaunchKernel ctx=0x1 dev=0 tid=1 ret=0 stream=0x1 x=1",
                "unknown key x",
            ),
            (
                "cuLaunchKernel ctx=0x1 dev=99999999999 tid=1 ret=0 stream=0x1",
                "too large",
            ),
            ("cuLaunchKernel ctx=0x1 stream", "is not key=value"),
            (
                "cuLaunchKernel ctx=0x1 dev=0 tid=1 ret=0 stream=0x1 args=0x1,2",
                "args=2 is not a 0x number",
            ),
        ];
        for (line, expected) in cases {
            let error = line.parse::<Call>().unwrap_err().to_string();
            assert!(error.contains(expected), "{line}: {error}");
        }
    }

    #[test]
    fn per_thread_forms_are_told_by_their_suffix() {
        let mut call = Call {
            function: "cuLaunchKernel_ptsz",
            kind: Kind::Work { stream: 0 },
            context: 1,
            device: Some(0),
            thread: 1,
            outcome: Outcome::Returned(0),
            args: Vec::new(),
        };
        assert!(call.per_thread());
        call.function = "cuMemcpy_ptds";
        assert!(call.per_thread());
        call.function = "cuLaunchKernel";
        assert!(!call.per_thread());
    }
}
