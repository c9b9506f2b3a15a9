//! Per-device workers: one OS thread per device with that device permanently current, running
//! queued actions in order, so a long driver call on one device never stalls a user thread
//! that drives another, and APIs with hidden thread-local state see one thread per device.
//!
//! Errors go back to whoever waits on the action's ticket, and are sticky per queue: after a
//! failure every later action fails with [`Error::QueueFailed`] (without running) until the
//! owner clears the error; the worker thread keeps running throughout.

use alloc::boxed::Box;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::{self, JoinHandle};

use gpu_core::backend::Backend;
use gpu_core::error::{Error, Result};
use gpu_core::id::DeviceId;

type Job<B> = Box<dyn FnOnce(&B) + Send>;

/// What a waiter receives: the action's result, once it has run (or been refused).
struct Slot<T> {
    result: Mutex<Option<Result<T>>>,
    ready: Condvar,
}

/// A claim on the result of one queued action.
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
/// use gpu_rt::runtime::DeviceWorker;
/// use std::sync::Arc;
///
/// let backend = Arc::new(HostBackend::new(HostConfig::with_devices(1)));
/// let worker = DeviceWorker::start(backend, DeviceId(0))?;
/// let tickets: Vec<_> = (0..4).map(|i| worker.submit(move |_| Ok(i * i))).collect();
/// let results = tickets.into_iter().map(|t| t.wait()).collect::<Result<Vec<_>>>()?;
/// assert_eq!(results, [0, 1, 4, 9]); // run in the order queued
/// # Ok::<(), Error>(())
/// ```
#[must_use = "an action's error is only seen by waiting on its ticket"]
pub struct Ticket<T> {
    slot: Arc<Slot<T>>,
}

impl<T> Ticket<T> {
    /// Blocks until the action has run; its result, or the queue's sticky error.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::runtime::DeviceWorker;
    /// use std::sync::Arc;
    ///
    /// let backend = Arc::new(HostBackend::new(HostConfig::with_devices(1)));
    /// let worker = DeviceWorker::start(backend, DeviceId(0))?;
    /// let ticket = worker.submit(|backend: &HostBackend| backend.current_device());
    /// assert_eq!(ticket.wait()?, Some(DeviceId(0)));
    /// let panicked = worker.submit(|_| -> Result<()> { panic!("in an action") });
    /// assert_eq!(panicked.wait().err(), Some(Error::ActionPanicked { device: DeviceId(0) }));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn wait(self) -> Result<T> {
        let mut result = self
            .slot
            .result
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(result) = result.take() {
                return result;
            }
            result = self
                .slot
                .ready
                .wait(result)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Whether the action has finished (successfully or not).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::runtime::DeviceWorker;
    /// use std::sync::{Arc, mpsc};
    ///
    /// let backend = Arc::new(HostBackend::new(HostConfig::with_devices(1)));
    /// let worker = DeviceWorker::start(backend, DeviceId(0))?;
    /// let (go, gate) = mpsc::channel::<()>();
    /// let ticket = worker.submit(move |_| Ok(gate.recv().is_ok()));
    /// assert!(!ticket.is_done()); // held at its gate
    /// go.send(()).unwrap();
    /// while !ticket.is_done() {
    ///     std::thread::yield_now();
    /// }
    /// assert!(ticket.wait()?);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn is_done(&self) -> bool {
        self.slot
            .result
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }
}

/// The worker thread of one device.
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
///
/// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2)))?;
/// // Driver calls with hidden thread-local state go to the device's own thread.
/// let worker = rt.worker(DeviceId(1))?;
/// let stream = worker.submit(|backend: &HostBackend| backend.stream_create(DeviceId(1))).wait()?;
/// worker.submit(move |backend: &HostBackend| backend.stream_destroy(stream)).wait()?;
/// assert_eq!(rt.backend().stats().streams, 0);
/// # Ok::<(), Error>(())
/// ```
pub struct DeviceWorker<B: Backend> {
    device: DeviceId,
    sender: Option<Sender<Job<B>>>,
    thread: Option<JoinHandle<()>>,
    sticky: Arc<Mutex<Option<Error>>>,
}

impl<B: Backend> DeviceWorker<B> {
    /// Starts the worker of `device`: its thread makes the device current once, for good.
    /// A failure to do so is the queue's first sticky error.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::runtime::DeviceWorker;
    /// use std::sync::Arc;
    ///
    /// let backend = Arc::new(HostBackend::new(HostConfig::with_devices(2)));
    /// let worker = DeviceWorker::start(Arc::clone(&backend), DeviceId(1))?;
    /// assert_eq!(worker.submit(|b: &HostBackend| b.current_device()).wait()?, Some(DeviceId(1)));
    /// assert!(DeviceWorker::start(backend, DeviceId(2)).is_err()); // no such device
    /// # Ok::<(), Error>(())
    /// ```
    pub fn start(backend: Arc<B>, device: DeviceId) -> Result<Self> {
        gpu_core::backend::check_device(&*backend, device)?;
        let (sender, receiver) = mpsc::channel::<Job<B>>();
        let sticky = Arc::new(Mutex::new(None));
        let thread_sticky = Arc::clone(&sticky);
        let thread = thread::Builder::new()
            .name(alloc::format!("gpu-worker-{}", device.0))
            .spawn(move || {
                if let Err(e) = backend.set_current_device(Some(device)) {
                    *thread_sticky.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
                }
                for job in receiver {
                    job(&backend);
                }
            })
            .map_err(|_| Error::HostOutOfMemory {
                what: "device worker thread",
            })?;
        Ok(Self {
            device,
            sender: Some(sender),
            thread: Some(thread),
            sticky,
        })
    }

    /// The device this worker drives.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2)))?;
    /// assert_eq!(rt.worker(DeviceId(1))?.device(), DeviceId(1));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn device(&self) -> DeviceId {
        self.device
    }

    /// Queues `action` behind everything queued before. It runs on the worker thread with the
    /// device current, unless the queue holds a sticky error, in which case it is refused
    /// with [`Error::QueueFailed`]. An action that fails (or panics) makes its error sticky.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::runtime::DeviceWorker;
    /// use std::sync::Arc;
    ///
    /// let backend = Arc::new(HostBackend::new(HostConfig::default()));
    /// let worker = DeviceWorker::start(backend, DeviceId(0))?;
    /// let failed = worker.submit(|_| -> Result<()> { Err(Error::ZeroSize { what: "demo" }) });
    /// assert!(failed.wait().is_err());
    /// // The failure is sticky: later actions are refused without running.
    /// let refused = worker.submit(|_| Ok(1));
    /// assert!(matches!(refused.wait(), Err(Error::QueueFailed { .. })));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn submit<T: Send + 'static>(
        &self,
        action: impl FnOnce(&B) -> Result<T> + Send + 'static,
    ) -> Ticket<T> {
        let slot = Arc::new(Slot {
            result: Mutex::new(None),
            ready: Condvar::new(),
        });
        let ticket = Ticket {
            slot: Arc::clone(&slot),
        };
        let sticky = Arc::clone(&self.sticky);
        let device = self.device;
        let job: Job<B> = Box::new(move |backend: &B| {
            let earlier = sticky
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            let result = match earlier {
                Some(cause) => Err(Error::QueueFailed {
                    device,
                    cause: Box::new(cause),
                }),
                None => catch_unwind(AssertUnwindSafe(|| action(backend)))
                    .unwrap_or_else(|_| Err(Error::ActionPanicked { device })),
            };
            if let Err(e) = &result
                && !matches!(e, Error::QueueFailed { .. })
            {
                *sticky.lock().unwrap_or_else(PoisonError::into_inner) = Some(e.clone());
            }
            *slot.result.lock().unwrap_or_else(PoisonError::into_inner) = Some(result);
            slot.ready.notify_all();
        });
        // The sender lives until drop; a send fails only when the thread is gone (the backend
        // itself panicked outside an action): refuse the action as a failed queue would.
        let sent = match &self.sender {
            Some(sender) => sender.send(job).map_err(|mpsc::SendError(job)| job),
            None => Err(job),
        };
        if let Err(job) = sent {
            drop(job);
            *ticket
                .slot
                .result
                .lock()
                .unwrap_or_else(PoisonError::into_inner) =
                Some(Err(Error::ActionPanicked { device }));
        }
        ticket
    }

    /// The queue's sticky error, if any, which is cleared: later actions run again.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::runtime::DeviceWorker;
    /// use std::sync::Arc;
    ///
    /// let backend = Arc::new(HostBackend::new(HostConfig::default()));
    /// let worker = DeviceWorker::start(backend, DeviceId(0))?;
    /// let _ = worker.submit(|_| -> Result<()> { Err(Error::ZeroSize { what: "demo" }) }).wait();
    /// assert_eq!(worker.clear_error(), Some(Error::ZeroSize { what: "demo" }));
    /// assert_eq!(worker.submit(|_| Ok(2)).wait()?, 2); // runs again
    /// # Ok::<(), Error>(())
    /// ```
    pub fn clear_error(&self) -> Option<Error> {
        self.sticky
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// The queue's sticky error, if any, left in place.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::runtime::DeviceWorker;
    /// use std::sync::Arc;
    ///
    /// let backend = Arc::new(HostBackend::new(HostConfig::default()));
    /// let worker = DeviceWorker::start(backend, DeviceId(0))?;
    /// assert_eq!(worker.error(), None);
    /// let _ = worker.submit(|_| -> Result<()> { Err(Error::ZeroSize { what: "demo" }) }).wait();
    /// assert_eq!(worker.error(), Some(Error::ZeroSize { what: "demo" }));
    /// assert!(worker.error().is_some()); // left in place
    /// # Ok::<(), Error>(())
    /// ```
    pub fn error(&self) -> Option<Error> {
        self.sticky
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl<B: Backend> Drop for DeviceWorker<B> {
    /// Runs what is queued, then ends the thread and joins it.
    fn drop(&mut self) {
        drop(self.sender.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
