//! The injected side: `InitializeInjection` subscribes to CUPTI's driver-API callbacks, each
//! callback reads its call's handles and footprint into a [`Call`], and one writer per process
//! serialises the calls through the [`Translator`] into `GPU_TRACE_OUT/gpu-trace.PID.trace`.
//!
//! Order: creations and uses are recorded when the driver returns, destroys and frees when they
//! are entered (before the handle or address can be reused), all under one lock, so the file's
//! order is one the calls could have run in. An `atexit` handler writes `exit` and flushes.
//!
//! A launch's parameters are read only where their sizes are known: the recorder asks the
//! loaded libcuda's `cuFuncGetParamInfo` (or `cuKernelGetParamInfo` for a `CUkernel`) once per
//! function, then reads each parameter's bytes through `kernelParams[i]` as 8-byte words (at
//! most [`MAX_WORDS_PER_PARAM`] per parameter). A launch that passes its parameters as one
//! buffer through `extra` (`CU_LAUNCH_PARAM_BUFFER_POINTER` and `_SIZE`) has that buffer read
//! the same way, as far as its size says. Without either (an older driver) nothing is read: the
//! launch has no footprint.

use core::ffi::{c_int, c_void};
use std::cell::Cell;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use crate::call::{Call, Kind, Outcome, RECORDED_FUNCTIONS};
use crate::cupti::{self, Cupti};
use crate::sys;
use crate::translate::Translator;
use hook::block_event;

mod hook;

/// The buffer between the translator and the trace file.
const WRITE_BUFFER_BYTES: usize = 1 << 20;

/// The most 8-byte words read from one kernel parameter: 4 KiB, CUDA's limit on a launch's
/// parameters before 12.1, so that a struct of pointers is read whole (PyTorch's reduction
/// kernels pass their tensors' pointers beyond the first 512 bytes of one such struct: a cap of
/// 64 words missed the read of a `sum` on a side stream on an H200).
pub(crate) const MAX_WORDS_PER_PARAM: usize = 512;

/// The most parameters asked of `cuFuncGetParamInfo` for one function.
const MAX_PARAMS: usize = 4096;

/// The driver functions the recorder calls, looked up in the loaded libcuda.
macro_rules! driver_library {
    ($($row:tt),* $(,)?) => {
        gpu_ffi_loader::dlsym_library! {
            /// The process's libcuda (already loaded: the driver loaded the recorder).
            pub struct Driver;
            backend: "cuda";
            file_names: &["libcuda.so.1", "libcuda.so"];
            $($row),*
        }
    };
}

mod driver {
    //! The generated driver library type, with the bindings' pointer types in scope.
    #[allow(clippy::wildcard_imports)]
    use crate::sys::*;

    crate::sys::driver_functions!(driver_library);
}

/// The parameter-size queries, where the driver has them.
struct ParamInfo {
    function: sys::PFN_cuFuncGetParamInfo,
    kernel: Option<sys::PFN_cuKernelGetParamInfo>,
    /// Keeps libcuda's handle open.
    _library: driver::Driver,
}

impl ParamInfo {
    fn load() -> Option<Self> {
        let library = driver::Driver::load().ok()?;
        Some(Self {
            function: library.cuFuncGetParamInfo().ok()?,
            kernel: library.cuKernelGetParamInfo().ok(),
            _library: library,
        })
    }

    /// The sizes of `function`'s parameters, asked of the driver (empty if it answers nothing
    /// for the first: no parameters, or a handle neither query knows).
    fn sizes(&self, function: u64) -> Box<[u32]> {
        let handle = function as usize as *mut c_void;
        let mut sizes = param_sizes(|index, offset, size| {
            // SAFETY: a function handle the program launched; the driver validates it and
            // writes two sizes.
            unsafe { (self.function)(handle.cast(), index, offset, size) }
        });
        if sizes.is_empty()
            && let Some(kernel) = self.kernel
        {
            sizes = param_sizes(|index, offset, size| {
                // SAFETY: as above, for a `CUkernel` handle.
                unsafe { kernel(handle.cast(), index, offset, size) }
            });
        }
        sizes.into_boxed_slice()
    }
}

/// The sizes `query` gives for parameters 0, 1, ... until it fails (at most [`MAX_PARAMS`]).
fn param_sizes(mut query: impl FnMut(usize, &mut usize, &mut usize) -> sys::CUresult) -> Vec<u32> {
    let mut sizes = Vec::new();
    for index in 0..MAX_PARAMS {
        let (mut offset, mut size) = (0usize, 0usize);
        if query(index, &mut offset, &mut size) != 0 {
            break;
        }
        sizes.push(u32::try_from(size).unwrap_or(u32::MAX));
    }
    sizes
}

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
    /// The driver's parameter-size queries (`None`: launches get no footprint).
    param_info: Option<ParamInfo>,
    /// Each launched function's parameter sizes, asked once (forgotten when code is unloaded).
    param_sizes: Mutex<HashMap<u64, Arc<[u32]>>>,
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

/// The most comments kept for the trace before recording starts.
const MAX_EARLY_COMMENTS: usize = 64;

/// Comments for the trace from before recording started (NVTX may attach before `cuInit`),
/// written when it starts. Locked before the output, never after.
static EARLY_COMMENTS: Mutex<Vec<String>> = Mutex::new(Vec::new());

thread_local! {
    static THREAD_ID: Cell<u64> = const { Cell::new(0) };
    /// The last context this thread's calls ran in, and its device.
    static LAST_CONTEXT: Cell<(u64, Option<u32>)> = const { Cell::new((0, None)) };
}

/// The last context any thread's calls ran in, and its device: for a block event from a thread
/// that made no driver call yet (PyTorch's autograd thread may allocate before it launches).
static PROCESS_CONTEXT: Mutex<(u64, Option<u32>)> = Mutex::new((0, None));

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

/// A sub-allocator's block event, from the recorded program itself (our runtime's PyTorch
/// plug-in, the recorder's PyTorch tracker shim and its NVTX injection call it, found with
/// `dlsym`): `op`'s low byte 0 handed out `bytes` at `address` for `stream` (a `CUstream`: 0 is
/// the legacy default stream, 2 the per-thread one), 1 took the block at `address` back into
/// `stream`'s pool, 2 marked it used on `stream` too; its second byte names the allocator (0
/// our runtime's PyTorch plug-in `gpurt`, 1 PyTorch's caching allocator `torch`, 2 NVTX memory
/// regions `nvtx`, 3 our runtime's buffers `gpurt_region`, from its CUDA and HIP backends'
/// `note_buffer`, with no stream). Event 3 announces the exact footprint of the thread's next
/// launch of a function on `stream` (our runtime's backends' `note_launch_footprint`): access
/// byte 0 begins it (`address` the `CUfunction`), 1, 2 and 3 add a range read, written or both;
/// the translation uses it instead of the parameters'. Written as `block_alloc` / `block_free` / `block_use` of that allocator, with the
/// context of the calling thread's last driver call. Does nothing while nothing is recorded or
/// for another `op`; never unwinds.
#[unsafe(no_mangle)]
pub extern "C" fn gpu_recorder_block(op: u32, address: u64, bytes: u64, stream: u64) {
    let _ = std::panic::catch_unwind(|| {
        let Some(recorder) = RECORDER.get() else {
            return;
        };
        let Some((function, kind)) = block_event(op, address, bytes, stream) else {
            return;
        };
        let (context, device) = match LAST_CONTEXT.get() {
            (0, _) => *PROCESS_CONTEXT.lock().unwrap_or_else(|e| e.into_inner()),
            known => known,
        };
        let call = Call {
            function,
            kind,
            context,
            device,
            thread: thread_id(),
            outcome: Outcome::Returned(0),
            args: Vec::new(),
        };
        recorder.output().write(&call);
    });
}

/// Writes `# LINE` into the trace, or keeps it until recording starts (the first
/// [`MAX_EARLY_COMMENTS`] of them).
pub(crate) fn comment(line: String) {
    let mut early = EARLY_COMMENTS.lock().unwrap_or_else(|e| e.into_inner());
    if early.len() < MAX_EARLY_COMMENTS {
        early.push(line);
    }
    write_early_comments(&mut early);
}

/// Writes and forgets the comments kept, once recording has started.
fn write_early_comments(early: &mut Vec<String>) {
    let Some(recorder) = RECORDER.get() else {
        return;
    };
    let mut output = recorder.output();
    for line in early.drain(..) {
        let _ = writeln!(output.text, "# {line}");
    }
    output.flush_text();
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
        param_info: ParamInfo::load(),
        param_sizes: Mutex::new(HashMap::new()),
        callbacks: AtomicU64::new(0),
        callback_nanos: AtomicU64::new(0),
    };
    let recorder = RECORDER.get_or_init(|| recorder);
    write_early_comments(&mut EARLY_COMMENTS.lock().unwrap_or_else(|e| e.into_inner()));
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

/// Destroys and frees: recorded when entered, before the handle or address can be reused.
fn recorded_on_entry(cbid: u32) -> bool {
    matches!(
        cbid,
        sys::CUPTI_DRIVER_TRACE_CBID_cuStreamDestroy
            | sys::CUPTI_DRIVER_TRACE_CBID_cuStreamDestroy_v2
            | sys::CUPTI_DRIVER_TRACE_CBID_cuEventDestroy
            | sys::CUPTI_DRIVER_TRACE_CBID_cuEventDestroy_v2
            | sys::CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2
            | sys::CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost
            | sys::CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync
            | sys::CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz
    )
}

/// Calls that unload code: function handles may be reused for other kernels after them.
fn unloads_code(cbid: u32) -> bool {
    matches!(
        cbid,
        sys::CUPTI_DRIVER_TRACE_CBID_cuModuleUnload | sys::CUPTI_DRIVER_TRACE_CBID_cuLibraryUnload
    )
}

/// # Safety
/// `data.functionParams` is the parameter struct of `cbid`, and at the exit site
/// `data.functionReturnValue` points at a `CUresult`.
unsafe fn record(recorder: &Recorder, cbid: u32, data: &sys::CUpti_CallbackData) {
    let outcome = if data.callbackSite == sys::CUPTI_API_EXIT {
        // SAFETY: at the exit site the return value is the call's CUresult.
        Outcome::Returned(unsafe { *data.functionReturnValue.cast::<sys::CUresult>() })
    } else if recorded_on_entry(cbid) {
        Outcome::Entered
    } else {
        return;
    };
    let context = data.context as usize as u64;
    let device = recorder.device_of(data.context);
    let thread = thread_id();
    if unloads_code(cbid) {
        recorder.forget_param_sizes();
    }
    // The lock is taken at the first line written, after a launch's parameters were read (the
    // driver is never called under it).
    let mut output: Option<MutexGuard<'_, Output>> = None;
    let mut sink = |function: &'static str, kind: Kind, args: Vec<u64>| {
        let output = output.get_or_insert_with(|| recorder.output());
        output.write(&Call {
            function,
            kind,
            context,
            device,
            thread,
            outcome,
            args,
        });
    };
    let mut words = |function: u64, params: *mut *mut c_void, extra: *mut *mut c_void| {
        if outcome != Outcome::Returned(0) {
            return Vec::new();
        }
        if params.is_null() {
            // SAFETY: the launch succeeded with this `extra` array, so it is null or
            // terminated, and its buffer has the size it says.
            return unsafe { extra_words(extra) };
        }
        let sizes = recorder.param_sizes(function);
        // SAFETY: the launch succeeded with these parameters, so `params` holds one pointer per
        // parameter, each to as many bytes as the driver says it has.
        unsafe { param_words(params, &sizes) }
    };
    // SAFETY: as this function's contract says.
    unsafe { read_call(cbid, data.functionParams, outcome, &mut words, &mut sink) };
}

/// `CU_LAUNCH_PARAM_END`, `CU_LAUNCH_PARAM_BUFFER_POINTER`, `CU_LAUNCH_PARAM_BUFFER_SIZE`: the
/// keys of a launch's `extra` array.
const EXTRA_END: usize = 0;
const EXTRA_BUFFER_POINTER: usize = 1;
const EXTRA_BUFFER_SIZE: usize = 2;

/// The most key-value pairs of an `extra` array read.
const MAX_EXTRA_PAIRS: usize = 16;

/// The nonzero 8-byte words of the parameter buffer a launch passed through `extra`
/// (`CU_LAUNCH_PARAM_BUFFER_POINTER` with `CU_LAUNCH_PARAM_BUFFER_SIZE`), at most
/// [`MAX_WORDS_PER_PARAM`] of them, as for one parameter.
///
/// # Safety
/// `extra` is null or an array of key-value pairs ended by `CU_LAUNCH_PARAM_END` that the driver
/// accepted: the buffer has the bytes its size says.
unsafe fn extra_words(extra: *mut *mut c_void) -> Vec<u64> {
    let (mut buffer, mut size): (*mut c_void, usize) = (core::ptr::null_mut(), 0);
    if extra.is_null() {
        return Vec::new();
    }
    for pair in 0..MAX_EXTRA_PAIRS {
        // SAFETY: the array holds pairs up to its end key, which is read first.
        let key = unsafe { *extra.add(2 * pair) } as usize;
        if key == EXTRA_END {
            break;
        }
        // SAFETY: a key other than the end has its value after it.
        let value = unsafe { *extra.add(2 * pair + 1) };
        match key {
            EXTRA_BUFFER_POINTER => buffer = value,
            // SAFETY: the size's value points at a `size_t`.
            EXTRA_BUFFER_SIZE if !value.is_null() => size = unsafe { *value.cast::<usize>() },
            _ => {}
        }
    }
    if buffer.is_null() || size < 8 {
        return Vec::new();
    }
    let size = u32::try_from(size.min(8 * MAX_WORDS_PER_PARAM)).unwrap_or(0);
    let mut pointer = buffer;
    // SAFETY: one "parameter" of `size` readable bytes (at most the buffer's).
    unsafe { param_words(&mut pointer, &[size]) }
}

/// The nonzero 8-byte words of a launch's parameters, `sizes[i]` bytes through `params[i]`
/// (at most [`MAX_WORDS_PER_PARAM`] each; a parameter shorter than 8 bytes has none).
///
/// # Safety
/// `params` is null or holds `sizes.len()` pointers, each null or to `sizes[i]` readable bytes.
unsafe fn param_words(params: *mut *mut c_void, sizes: &[u32]) -> Vec<u64> {
    let mut words = Vec::new();
    if params.is_null() {
        return words;
    }
    for (i, &size) in sizes.iter().enumerate() {
        // SAFETY: `params` has `sizes.len()` entries.
        let param = unsafe { *params.add(i) }.cast::<u8>();
        if param.is_null() {
            continue;
        }
        for word in 0..(size as usize / 8).min(MAX_WORDS_PER_PARAM) {
            // SAFETY: within the parameter's `size` bytes; parameters need not be aligned.
            let value = unsafe { param.add(word * 8).cast::<u64>().read_unaligned() };
            if value != 0 {
                words.push(value);
            }
        }
    }
    words
}

impl Recorder {
    fn output(&self) -> MutexGuard<'_, Output> {
        self.output.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The parameter sizes of `function`, asked of the driver at its first launch (with no
    /// lock held); empty where the driver cannot say.
    fn param_sizes(&self, function: u64) -> Arc<[u32]> {
        let cache = || self.param_sizes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sizes) = cache().get(&function) {
            return Arc::clone(sizes);
        }
        let sizes: Arc<[u32]> = match &self.param_info {
            Some(info) => info.sizes(function).into(),
            None => Arc::from([]),
        };
        cache().insert(function, Arc::clone(&sizes));
        sizes
    }

    /// Forgets every function's parameter sizes (code was unloaded: handles may be reused).
    fn forget_param_sizes(&self) {
        self.param_sizes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
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
        *PROCESS_CONTEXT.lock().unwrap_or_else(|e| e.into_inner()) = (key, device);
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
    (stream_create, $p:ident, $outcome:ident, [$out:ident, $flags:ident], $words:ident, $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::StreamCreate {
            stream: created($p.$out.cast(), $outcome),
            flags: $p.$flags,
        }, Vec::new())
    };
    (event_create, $p:ident, $outcome:ident, [$out:ident], $words:ident, $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::EventCreate {
            event: created($p.$out.cast(), $outcome),
        }, Vec::new())
    };
    (stream_destroy, $p:ident, $outcome:ident, [$s:ident], $words:ident, $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::StreamDestroy { stream: handle($p.$s) }, Vec::new())
    };
    (event_destroy, $p:ident, $outcome:ident, [$e:ident], $words:ident, $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::EventDestroy { event: handle($p.$e) }, Vec::new())
    };
    (event_record, $p:ident, $outcome:ident, [$e:ident, $s:ident], $words:ident, $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::EventRecord {
            event: handle($p.$e),
            stream: handle($p.$s),
        }, Vec::new())
    };
    (stream_wait_event, $p:ident, $outcome:ident, [$s:ident, $e:ident], $words:ident, $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::StreamWaitEvent {
            stream: handle($p.$s),
            event: handle($p.$e),
        }, Vec::new())
    };
    (stream_synchronize, $p:ident, $outcome:ident, [$s:ident], $words:ident, $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::StreamSynchronize { stream: handle($p.$s) }, Vec::new())
    };
    (stream_query, $p:ident, $outcome:ident, [$s:ident], $words:ident, $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::StreamQuery { stream: handle($p.$s) }, Vec::new())
    };
    (event_synchronize, $p:ident, $outcome:ident, [$e:ident], $words:ident, $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::EventSynchronize { event: handle($p.$e) }, Vec::new())
    };
    (event_query, $p:ident, $outcome:ident, [$e:ident], $words:ident, $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::EventQuery { event: handle($p.$e) }, Vec::new())
    };
    (work, $p:ident, $outcome:ident, [$s:ident], $words:ident, $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::Work { stream: handle($p.$s) }, Vec::new())
    };
    (launch, $p:ident, $outcome:ident, [$f:ident, $params:ident, $s:ident], $words:ident, $sink:ident, $name:ident) => {
        let function = handle($p.$f);
        let args = $words(function, $p.$params, core::ptr::null_mut());
        $sink(stringify!($name), Kind::Launch { stream: handle($p.$s), function }, args)
    };
    (launch_extra, $p:ident, $outcome:ident, [$f:ident, $params:ident, $extra:ident, $s:ident], $words:ident, $sink:ident, $name:ident) => {
        let function = handle($p.$f);
        let args = $words(function, $p.$params, $p.$extra);
        $sink(stringify!($name), Kind::Launch { stream: handle($p.$s), function }, args)
    };
    (launch_config, $p:ident, $outcome:ident, [$config:ident, $f:ident, $params:ident, $extra:ident], $words:ident, $sink:ident, $name:ident) => {
        if !$p.$config.is_null() {
            // SAFETY: a non-null CUlaunchConfig pointer the program passed to the launch.
            let stream = unsafe { (*$p.$config).hStream };
            let function = handle($p.$f);
            let args = $words(function, $p.$params, $p.$extra);
            $sink(stringify!($name), Kind::Launch { stream: handle(stream), function }, args)
        }
    };
    (copy, $p:ident, $outcome:ident, [$d:ident, $src:ident, $n:ident, $s:ident], $words:ident, $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::Copy {
            stream: handle($p.$s),
            dst: address($p.$d),
            src: address($p.$src),
            bytes: $p.$n as u64,
        }, Vec::new())
    };
    (copy_sync, $p:ident, $outcome:ident, [$d:ident, $src:ident, $n:ident], $words:ident, $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::CopySync {
            dst: address($p.$d),
            src: address($p.$src),
            bytes: $p.$n as u64,
        }, Vec::new())
    };
    (fill, $p:ident, $outcome:ident, [$d:ident, $n:ident, $s:ident], $words:ident, $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::Fill {
            stream: handle($p.$s),
            dst: address($p.$d),
            bytes: ($p.$n as u64).saturating_mul(element_size(stringify!($name))),
        }, Vec::new())
    };
    (fill_sync, $p:ident, $outcome:ident, [$d:ident, $n:ident], $words:ident, $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::FillSync {
            dst: address($p.$d),
            bytes: ($p.$n as u64).saturating_mul(element_size(stringify!($name))),
        }, Vec::new())
    };
    (alloc, $p:ident, $outcome:ident, [$out:ident, $n:ident], $words:ident, $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::Alloc {
            address: written($p.$out, $outcome),
            bytes: $p.$n as u64,
        }, Vec::new())
    };
    (alloc_async, $p:ident, $outcome:ident, [$out:ident, $n:ident, $s:ident], $words:ident, $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::AllocAsync {
            stream: handle($p.$s),
            address: written($p.$out, $outcome),
            bytes: $p.$n as u64,
        }, Vec::new())
    };
    (free, $p:ident, $outcome:ident, [$a:ident], $words:ident, $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::Free { address: address($p.$a) }, Vec::new())
    };
    (free_async, $p:ident, $outcome:ident, [$a:ident, $s:ident], $words:ident, $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::FreeAsync {
            stream: handle($p.$s),
            address: address($p.$a),
        }, Vec::new())
    };
    (work_each, $p:ident, $outcome:ident, [$list:ident, $count:ident], $words:ident, $sink:ident, $name:ident) => {
        if !$p.$list.is_null() {
            for i in 0..$p.$count as usize {
                // SAFETY: the program passed an array of `count` launch parameters.
                let stream = unsafe { (*$p.$list.add(i)).hStream };
                $sink(stringify!($name), Kind::Work { stream: handle(stream) }, Vec::new())
            }
        }
    };
    (begin_capture, $p:ident, $outcome:ident, [$s:ident], $words:ident, $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::BeginCapture { stream: handle($p.$s) }, Vec::new())
    };
    (end_capture, $p:ident, $outcome:ident, [$s:ident], $words:ident, $sink:ident, $name:ident) => {
        $sink(stringify!($name), Kind::EndCapture { stream: handle($p.$s) }, Vec::new())
    };
}

/// The reader of every recorded call, by callback id.
macro_rules! call_reader {
    ($(($name:ident, $cbid:ident, $params:ident, $kind:ident, [$($field:ident),*])),* $(,)?) => {
        /// Reads the handles and footprint of call `cbid` from its parameters and hands each
        /// resulting [`Kind`] (a multi-device launch has several) to `sink` with the function's
        /// name and, for a launch, the words `words` read from its function's parameters.
        ///
        /// # Safety
        /// `params` points at the `<function>_params` struct of `cbid`.
        unsafe fn read_call(
            cbid: u32,
            params: *const c_void,
            outcome: Outcome,
            words: &mut dyn FnMut(u64, *mut *mut c_void, *mut *mut c_void) -> Vec<u64>,
            sink: &mut dyn FnMut(&'static str, Kind, Vec<u64>),
        ) {
            let _ = outcome;
            match cbid {
                $(sys::$cbid => {
                    // SAFETY: as the contract says.
                    let p = unsafe { &*params.cast::<sys::$params>() };
                    read_kind!($kind, p, outcome, [$($field),*], words, sink, $name);
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
        fn read_note(cbid: u32, sink: &mut dyn FnMut(&'static str, Kind, Vec<u64>)) {
            match cbid {
                $(sys::$cbid => sink(stringify!($name), Kind::Note, Vec::new()),)*
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

/// An address parameter (a `CUdeviceptr` or a host pointer) as a number.
fn address(value: impl Address) -> u64 {
    value.address()
}

/// What an address parameter may be.
trait Address: Copy {
    fn address(self) -> u64;
}

impl Address for u64 {
    fn address(self) -> u64 {
        self
    }
}

impl<T> Address for *const T {
    fn address(self) -> u64 {
        self as usize as u64
    }
}

impl<T> Address for *mut T {
    fn address(self) -> u64 {
        self as usize as u64
    }
}

/// The address an allocating call wrote through `out`, once it succeeded (0 otherwise).
fn written<T: Address>(out: *mut T, outcome: Outcome) -> u64 {
    if outcome != Outcome::Returned(0) || out.is_null() {
        return 0;
    }
    // SAFETY: the call succeeded, so it wrote the address through the program's pointer.
    unsafe { *out }.address()
}

/// The element size of a fill, from its function's name (`cuMemsetD16Async`: 2).
const fn element_size(name: &str) -> u64 {
    let bytes = name.as_bytes();
    let mut i = 0;
    while i + 2 < bytes.len() {
        if bytes[i] == b'D' && bytes[i + 1] == b'1' && bytes[i + 2] == b'6' {
            return 2;
        }
        if bytes[i] == b'D' && bytes[i + 1] == b'3' && bytes[i + 2] == b'2' {
            return 4;
        }
        i += 1;
    }
    1
}

/// The handle a creating call wrote through `out`, once it succeeded (0 otherwise).
fn created(out: *mut *mut c_void, outcome: Outcome) -> u64 {
    if outcome != Outcome::Returned(0) || out.is_null() {
        return 0;
    }
    // SAFETY: the call succeeded, so it wrote a handle through the program's pointer.
    handle(unsafe { *out })
}

#[cfg(test)]
mod tests;
