//! The injected side: `InitializeInjection` subscribes to CUPTI's driver-API callbacks, each
//! callback reads its call's handles into a [`Call`], and one writer per process serialises the
//! calls through the [`Translator`] into `GPU_TRACE_OUT/gpu-trace.PID.trace`.
//!
//! Order: creations and uses are recorded when the driver returns, destroys when they are
//! entered (before the handle can be reused), all under one lock, so the file's order is one the
//! calls could have run in. An `atexit` handler writes `exit` and flushes.

use core::ffi::{c_int, c_void};
use std::cell::Cell;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use crate::call::{Call, Kind, Outcome, RECORDED_FUNCTIONS};
use crate::cupti::{self, Cupti};
use crate::sys;
use crate::translate::Translator;

/// The buffer between the translator and the trace file.
const WRITE_BUFFER_BYTES: usize = 1 << 20;

/// The CUPTI functions the recorder calls, looked up once at start.
struct Functions {
    subscribe: sys::PFN_cuptiSubscribe,
    enable_callback: sys::PFN_cuptiEnableCallback,
    get_device_id: sys::PFN_cuptiGetDeviceId,
    get_result_string: sys::PFN_cuptiGetResultString,
}

impl Functions {
    fn of(cupti: &Cupti) -> Result<Self, gpu_core::Error> {
        Ok(Self {
            subscribe: cupti.cuptiSubscribe()?,
            enable_callback: cupti.cuptiEnableCallback()?,
            get_device_id: cupti.cuptiGetDeviceId()?,
            get_result_string: cupti.cuptiGetResultString()?,
        })
    }
}

/// The recording of this process.
struct Recorder {
    cupti: Functions,
    /// Keeps libcupti loaded.
    _library: Cupti,
    output: Mutex<Output>,
    devices: Mutex<HashMap<u64, Option<u32>>>,
    /// Callbacks received, and the nanoseconds spent in them (reported at exit).
    callbacks: AtomicU64,
    callback_nanos: AtomicU64,
}

/// What the lock serialises: the translation and the files.
struct Output {
    /// The process that opened the files: a forked child leaves them alone at its exit.
    pid: u32,
    translator: Translator,
    trace: BufWriter<File>,
    calls: Option<BufWriter<File>>,
    text: String,
    /// Flush after every call (`GPU_RECORDER_FLUSH=each`), for programs that crash.
    flush_each: bool,
    exited: bool,
    write_failed: bool,
}

static RECORDER: OnceLock<Recorder> = OnceLock::new();

thread_local! {
    static THREAD_ID: Cell<u64> = const { Cell::new(0) };
    /// The last context this thread's calls ran in, and its device.
    static LAST_CONTEXT: Cell<(u64, Option<u32>)> = const { Cell::new((0, None)) };
}

/// The driver calls this once when it initialises, if `CUDA_INJECTION64_PATH` names this
/// library. It always returns 1, so the driver goes on: when recording cannot start (no
/// `GPU_TRACE_OUT`, no libcupti, a CUPTI error) it says why on stderr and the program runs
/// unrecorded.
#[unsafe(no_mangle)]
pub extern "C" fn InitializeInjection() -> c_int {
    let started = std::panic::catch_unwind(|| {
        if RECORDER.get().is_some() {
            return Ok(());
        }
        start(|name| std::env::var_os(name))
    });
    match started {
        Ok(Ok(())) => {}
        Ok(Err(message)) => eprintln!("gpu-recorder: {message}; the program runs unrecorded"),
        Err(_) => eprintln!("gpu-recorder: internal error; the program runs unrecorded"),
    }
    1
}

fn start(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Result<(), String> {
    let dir = var("GPU_TRACE_OUT")
        .map(PathBuf::from)
        .ok_or("GPU_TRACE_OUT=DIR is not set")?;
    let library = cupti::open(&cupti::candidates(&var))?;
    let functions = Functions::of(&library).map_err(|e| e.to_string())?;
    let pid = std::process::id();
    let trace = create(&dir, &format!("gpu-trace.{pid}.trace"))?;
    let calls = match var("GPU_RECORDER_CALLS") {
        Some(_) => Some(create(&dir, &format!("gpu-trace.{pid}.calls"))?),
        None => None,
    };
    let recorder = Recorder {
        cupti: functions,
        _library: library,
        output: Mutex::new(Output {
            pid,
            translator: Translator::new(),
            trace,
            calls,
            text: String::with_capacity(256),
            flush_each: var("GPU_RECORDER_FLUSH").is_some_and(|value| value == "each"),
            exited: false,
            write_failed: false,
        }),
        devices: Mutex::new(HashMap::new()),
        callbacks: AtomicU64::new(0),
        callback_nanos: AtomicU64::new(0),
    };
    let recorder = RECORDER.get_or_init(|| recorder);
    let mut subscriber: sys::CUpti_SubscriberHandle = core::ptr::null_mut();
    // SAFETY: the callback has CUPTI's callback signature and never unwinds.
    check(recorder, "cuptiSubscribe", unsafe {
        (recorder.cupti.subscribe)(&mut subscriber, Some(on_call), core::ptr::null_mut())
    })?;
    // A measurement switch: subscribed, but no callback enabled (what CUPTI alone costs).
    let functions = match var("GPU_RECORDER_SUBSCRIBE_ONLY") {
        Some(_) => &[][..],
        None => RECORDED_FUNCTIONS,
    };
    for &(cbid, function, _) in functions {
        // SAFETY: a subscriber CUPTI just returned, and a callback id of the driver domain.
        let result = unsafe {
            (recorder.cupti.enable_callback)(1, subscriber, sys::CUPTI_CB_DOMAIN_DRIVER_API, cbid)
        };
        if result != sys::CUPTI_SUCCESS {
            // A callback id this CUPTI does not know (an older one): record the rest.
            eprintln!(
                "gpu-recorder: {function} is not recorded: {}",
                result_text(recorder, result)
            );
        }
    }
    // SAFETY: `finish` is an `extern "C" fn()` that never unwinds.
    if unsafe { libc::atexit(finish) } != 0 {
        eprintln!("gpu-recorder: atexit failed: the trace will have no `exit` line");
    }
    Ok(())
}

fn create(dir: &Path, name: &str) -> Result<BufWriter<File>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let path = dir.join(name);
    let file = File::create(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    Ok(BufWriter::with_capacity(WRITE_BUFFER_BYTES, file))
}

fn check(recorder: &Recorder, what: &str, result: sys::CUptiResult) -> Result<(), String> {
    if result == sys::CUPTI_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what} failed: {}", result_text(recorder, result)))
    }
}

fn result_text(recorder: &Recorder, result: sys::CUptiResult) -> String {
    let mut text: *const core::ffi::c_char = core::ptr::null();
    // SAFETY: CUPTI writes a pointer to a static string.
    let found = unsafe { (recorder.cupti.get_result_string)(result, &mut text) };
    if found == sys::CUPTI_SUCCESS && !text.is_null() {
        // SAFETY: a NUL-terminated static string from CUPTI.
        let text = unsafe { core::ffi::CStr::from_ptr(text) };
        format!("{} (CUptiResult {result})", text.to_string_lossy())
    } else {
        format!("CUptiResult {result}")
    }
}

/// CUPTI's callback: never unwinds into the driver.
unsafe extern "C" fn on_call(
    _userdata: *mut c_void,
    _domain: sys::CUpti_CallbackDomain,
    cbid: sys::CUpti_CallbackId,
    data: *const c_void,
) {
    let _ = std::panic::catch_unwind(|| {
        if let Some(recorder) = RECORDER.get()
            && !data.is_null()
        {
            let started = Instant::now();
            // SAFETY: for the driver domain CUPTI passes a CUpti_CallbackData.
            let data = unsafe { &*data.cast::<sys::CUpti_CallbackData>() };
            // SAFETY: the parameters are the `<function>_params` struct of `cbid`.
            unsafe { record(recorder, cbid, data) };
            let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            recorder.callbacks.fetch_add(1, Ordering::Relaxed);
            recorder.callback_nanos.fetch_add(nanos, Ordering::Relaxed);
        }
    });
}

fn is_destroy(cbid: u32) -> bool {
    matches!(
        cbid,
        sys::CUPTI_DRIVER_TRACE_CBID_cuStreamDestroy
            | sys::CUPTI_DRIVER_TRACE_CBID_cuStreamDestroy_v2
            | sys::CUPTI_DRIVER_TRACE_CBID_cuEventDestroy
            | sys::CUPTI_DRIVER_TRACE_CBID_cuEventDestroy_v2
    )
}

/// # Safety
/// `data.functionParams` is the parameter struct of `cbid`, and at the exit site
/// `data.functionReturnValue` points at a `CUresult`.
unsafe fn record(recorder: &Recorder, cbid: u32, data: &sys::CUpti_CallbackData) {
    let outcome = if data.callbackSite == sys::CUPTI_API_EXIT {
        // SAFETY: at the exit site the return value is the call's CUresult.
        Outcome::Returned(unsafe { *data.functionReturnValue.cast::<sys::CUresult>() })
    } else if is_destroy(cbid) {
        Outcome::Entered
    } else {
        return;
    };
    let context = data.context as usize as u64;
    let device = recorder.device_of(data.context);
    let thread = thread_id();
    let mut output = recorder.output();
    let mut sink = |function: &'static str, kind: Kind| {
        output.write(&Call {
            function,
            kind,
            context,
            device,
            thread,
            outcome,
        });
    };
    // SAFETY: as this function's contract says.
    unsafe { read_call(cbid, data.functionParams, outcome, &mut sink) };
}

impl Recorder {
    fn output(&self) -> MutexGuard<'_, Output> {
        self.output.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The device of a context, asked of CUPTI once per context (no driver call); a thread's
    /// last context is remembered without a lock. (A context handle reused after
    /// cuCtxDestroy for another device would keep its first device.)
    fn device_of(&self, context: sys::CUcontext) -> Option<u32> {
        if context.is_null() {
            return None;
        }
        let key = context as usize as u64;
        let (last, device) = LAST_CONTEXT.get();
        if last == key {
            return device;
        }
        let device = self.device_of_new(context, key);
        LAST_CONTEXT.set((key, device));
        device
    }

    fn device_of_new(&self, context: sys::CUcontext, key: u64) -> Option<u32> {
        if let Some(&device) = self
            .devices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return device;
        }
        let mut device = 0;
        // SAFETY: a context the driver handed to the callback; CUPTI writes a u32.
        let result = unsafe { (self.cupti.get_device_id)(context, &mut device) };
        let device = (result == sys::CUPTI_SUCCESS).then_some(device);
        self.devices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, device);
        device
    }
}

impl Output {
    fn write(&mut self, call: &Call) {
        if let Some(calls) = &mut self.calls {
            let _ = writeln!(calls, "{call}");
        }
        self.translator.translate(call, &mut self.text);
        self.flush_text();
    }

    fn flush_text(&mut self) {
        let mut result = self.trace.write_all(self.text.as_bytes());
        self.text.clear();
        if self.exited || self.flush_each {
            result = result.and_then(|()| self.trace.flush());
        }
        if let Err(error) = result
            && !self.write_failed
        {
            self.write_failed = true;
            eprintln!("gpu-recorder: cannot write the trace: {error}");
        }
    }
}

/// The `atexit` handler: `exit`, then everything flushed.
extern "C" fn finish() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(recorder) = RECORDER.get() {
            let mut output = recorder.output();
            let output = &mut *output;
            if output.pid != std::process::id() {
                // A forked child exits: its copy of the buffer is the parent's to write.
                return;
            }
            output.translator.exit(&mut output.text);
            let callbacks = recorder.callbacks.load(Ordering::Relaxed);
            let nanos = recorder.callback_nanos.load(Ordering::Relaxed);
            let _ = writeln!(
                output.text,
                "# gpu-recorder: {callbacks} callbacks (entry and exit), {nanos} ns in them, {} ns each",
                nanos / callbacks.max(1)
            );
            output.exited = true;
            output.flush_text();
            if let Some(calls) = &mut output.calls {
                let _ = calls.flush();
            }
        }
    });
}

fn thread_id() -> u64 {
    THREAD_ID.with(|id| {
        if id.get() == 0 {
            // SAFETY: gettid has no preconditions.
            id.set(u64::try_from(unsafe { libc::gettid() }).unwrap_or(0));
        }
        id.get()
    })
}

/// One reader per recorded call: which handles its parameters hold, by kind.
macro_rules! read_kind {
    (stream_create, $p:ident, $outcome:ident, [$out:ident], $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::StreamCreate {
            stream: created($p.$out.cast(), $outcome),
        })
    };
    (event_create, $p:ident, $outcome:ident, [$out:ident], $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::EventCreate {
            event: created($p.$out.cast(), $outcome),
        })
    };
    (stream_destroy, $p:ident, $outcome:ident, [$s:ident], $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::StreamDestroy { stream: handle($p.$s) })
    };
    (event_destroy, $p:ident, $outcome:ident, [$e:ident], $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::EventDestroy { event: handle($p.$e) })
    };
    (event_record, $p:ident, $outcome:ident, [$e:ident, $s:ident], $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::EventRecord {
            event: handle($p.$e),
            stream: handle($p.$s),
        })
    };
    (stream_wait_event, $p:ident, $outcome:ident, [$s:ident, $e:ident], $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::StreamWaitEvent {
            stream: handle($p.$s),
            event: handle($p.$e),
        })
    };
    (stream_synchronize, $p:ident, $outcome:ident, [$s:ident], $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::StreamSynchronize { stream: handle($p.$s) })
    };
    (stream_query, $p:ident, $outcome:ident, [$s:ident], $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::StreamQuery { stream: handle($p.$s) })
    };
    (event_synchronize, $p:ident, $outcome:ident, [$e:ident], $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::EventSynchronize { event: handle($p.$e) })
    };
    (event_query, $p:ident, $outcome:ident, [$e:ident], $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::EventQuery { event: handle($p.$e) })
    };
    (work, $p:ident, $outcome:ident, [$s:ident], $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::Work { stream: handle($p.$s) })
    };
    (work_config, $p:ident, $outcome:ident, [$config:ident], $sink:ident, $name:ident) => {
        if !$p.$config.is_null() {
            // SAFETY: a non-null CUlaunchConfig pointer the program passed to the launch.
            let stream = unsafe { (*$p.$config).hStream };
            $sink(stringify!($name), Kind::Work { stream: handle(stream) })
        }
    };
    (work_each, $p:ident, $outcome:ident, [$list:ident, $count:ident], $sink:ident, $name:ident) => {
        if !$p.$list.is_null() {
            for i in 0..$p.$count as usize {
                // SAFETY: the program passed an array of `count` launch parameters.
                let stream = unsafe { (*$p.$list.add(i)).hStream };
                $sink(stringify!($name), Kind::Work { stream: handle(stream) })
            }
        }
    };
    (begin_capture, $p:ident, $outcome:ident, [$s:ident], $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::BeginCapture { stream: handle($p.$s) })
    };
    (end_capture, $p:ident, $outcome:ident, [$s:ident], $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::EndCapture { stream: handle($p.$s) })
    };
}

/// The reader of every recorded call, by callback id.
macro_rules! call_reader {
    ($(($name:ident, $cbid:ident, $params:ident, $kind:ident, [$($field:ident),*])),* $(,)?) => {
        /// Reads the handles of call `cbid` from its parameters and hands each resulting
        /// [`Kind`] (a multi-device launch has several) to `sink` with the function's name.
        ///
        /// # Safety
        /// `params` points at the `<function>_params` struct of `cbid`.
        unsafe fn read_call(
            cbid: u32,
            params: *const c_void,
            outcome: Outcome,
            sink: &mut dyn FnMut(&'static str, Kind),
        ) {
            let _ = outcome;
            match cbid {
                $(sys::$cbid => {
                    // SAFETY: as the contract says.
                    let p = unsafe { &*params.cast::<sys::$params>() };
                    read_kind!($kind, p, outcome, [$($field),*], sink, $name);
                })*
                _ => read_note(cbid, sink),
            }
        }
    };
}

sys::recorded_calls!(call_reader);

macro_rules! note_reader {
    ($(($name:ident, $cbid:ident)),* $(,)?) => {
        /// A call the trace keeps as a comment.
        fn read_note(cbid: u32, sink: &mut dyn FnMut(&'static str, Kind)) {
            match cbid {
                $(sys::$cbid => sink(stringify!($name), Kind::Note),)*
                _ => {}
            }
        }
    };
}

sys::noted_calls!(note_reader);

/// A driver handle as a number.
fn handle<T>(pointer: *mut T) -> u64 {
    pointer as usize as u64
}

/// The handle a creating call wrote through `out`, once it succeeded (0 otherwise).
fn created(out: *mut *mut c_void, outcome: Outcome) -> u64 {
    if outcome != Outcome::Returned(0) || out.is_null() {
        return 0;
    }
    // SAFETY: the call succeeded, so it wrote a handle through the program's pointer.
    handle(unsafe { *out })
}
