//! Recording device-memory allocations in the allocation trace format for `gpu-alloc-replay`
//! (docs/alloc-trace-format.md): each allocation, free and use on another stream, with its
//! device, stream and size, as the caching allocator was asked.
//!
//! One writer is shared by every device; each device's memory numbers its live allocations
//! from a counter the devices share, so numbers are unique in the trace. A failed write stops
//! the recording (the first error is kept for [`AllocTrace::finish`]); it never fails a call.

use alloc::boxed::Box;
use alloc::sync::Arc;
use std::io::{self, BufWriter, Write};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use gpu_core::allocator::BlockHandle;
use gpu_core::allocator::replay::TRACE_HEADER;
use gpu_core::id::{DeviceId, StreamId};

/// The shared end of a recording: the writer and the allocation counter.
pub struct AllocTrace {
    out: Mutex<Option<BufWriter<Box<dyn Write + Send>>>>,
    failure: Mutex<Option<io::Error>>,
    next_id: AtomicU64,
}

impl AllocTrace {
    /// A recording into `out`, its header written.
    pub(crate) fn new(out: Box<dyn Write + Send>) -> io::Result<Arc<Self>> {
        let mut out = BufWriter::with_capacity(1 << 16, out);
        writeln!(out, "{TRACE_HEADER}")?;
        Ok(Arc::new(Self {
            out: Mutex::new(Some(out)),
            failure: Mutex::new(None),
            next_id: AtomicU64::new(1),
        }))
    }

    /// Writes one line; a failure stops the recording and is kept.
    fn line(&self, args: core::fmt::Arguments<'_>) {
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(writer) = out.as_mut()
            && let Err(error) = writer
                .write_fmt(args)
                .and_then(|()| writer.write_all(b"\n"))
        {
            *out = None;
            *self.failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(error);
        }
    }

    /// Flushes what is written and stops the recording; the first write error, if one came.
    pub fn finish(&self) -> io::Result<()> {
        let writer = self.out.lock().unwrap_or_else(|e| e.into_inner()).take();
        let flushed = writer.map_or(Ok(()), |mut writer| writer.flush());
        match self
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            Some(error) => Err(error),
            None => flushed,
        }
    }
}

/// One device's side of a recording: the numbers of its live allocations.
pub(crate) struct DeviceTrace {
    shared: Arc<AllocTrace>,
    device: DeviceId,
    ids: hashbrown::HashMap<BlockHandle, u64>,
}

impl DeviceTrace {
    pub(crate) fn new(shared: Arc<AllocTrace>, device: DeviceId) -> Self {
        Self {
            shared,
            device,
            ids: hashbrown::HashMap::new(),
        }
    }

    /// The same recording for `device`'s fresh memory (after a reset): no live allocations.
    pub(crate) fn fresh(&self) -> Self {
        Self::new(Arc::clone(&self.shared), self.device)
    }

    /// An allocation of `size` bytes for `stream` (`None`: synchronous).
    pub(crate) fn alloc(&mut self, handle: BlockHandle, stream: Option<StreamId>, size: usize) {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        self.ids.insert(handle, id);
        let device = self.device.0;
        match stream {
            Some(stream) => self
                .shared
                .line(format_args!("alloc {id} {device} {} {size}", stream.0)),
            None => self
                .shared
                .line(format_args!("alloc {id} {device} - {size}")),
        }
    }

    /// A use of the allocation on `stream`, besides its own.
    pub(crate) fn use_on(&mut self, handle: BlockHandle, stream: StreamId) {
        if let Some(id) = self.ids.get(&handle) {
            self.shared.line(format_args!("use {id} {}", stream.0));
        }
    }

    /// A free ordered after the work of `uses` (none: after all its work completed).
    pub(crate) fn free(&mut self, handle: BlockHandle, uses: &[StreamId]) {
        let Some(id) = self.ids.remove(&handle) else {
            return;
        };
        match uses.split_first() {
            None => self.shared.line(format_args!("free {id} -")),
            Some((first, others)) => {
                for other in others {
                    self.shared.line(format_args!("use {id} {}", other.0));
                }
                self.shared.line(format_args!("free {id} {}", first.0));
            }
        }
    }
}
