//! Replays an allocation trace (docs/alloc-trace-format.md) through the allocator policy,
//! without a GPU, under each configuration asked for, and reports peak reserved, peak live,
//! fragmentation, driver allocations and frees, cache hits, and the first request that would
//! have failed under a memory cap.
//!
//! Usage: `gpu-alloc-replay [--config NAME[:KEY=VALUE,...]]... [--cap BYTES] [--json] FILE`
//! (`-` reads standard input). Keys: `max_split_size` (bytes or `none`),
//! `release_before_growing`, `wait_before_growing`, `growable_segments` (`0`/`1`),
//! `max_streams`. Driver allocations and frees count segments and, with growable segments,
//! mapped and unmapped pieces. Without
//! `--config`, the default settings. The trace is read line by line, once for all
//! configurations: memory is bounded by the live allocations. Exit status: 0 when replayed,
//! 2 for a bad command line or a trace that cannot be read or parsed (named `FILE:LINE`).

use std::ffi::OsString;
use std::io::{self, Write};
use std::process::ExitCode;
use std::time::Instant;

use gpu_runtime::allocator::AllocatorConfig;
use gpu_runtime::allocator::replay::{Replay, ReplayConfig, ReplayReport};
use gpu_runtime::cli::{ErrorBudget, LineReader, Located, Stop, Tool, USAGE_ERROR, lexopt};
use gpu_runtime::error::Error;

const TOOL: Tool = Tool {
    name: "gpu-alloc-replay",
    usage: "gpu-alloc-replay [--config NAME[:KEY=VALUE,...]]... [--cap BYTES] [--json] \
            [--max-errors N] FILE",
    help: "\
Replays FILE, an allocation trace (docs/alloc-trace-format.md; `-` reads standard input),
through the allocator policy under each configuration, without a GPU, and reports peak
reserved, peak live, fragmentation, driver allocations and frees, cache hits, and the first
request that would fail under the cap.

options:
  --config NAME[:KEY=VALUE,...]  a configuration to replay (repeatable; none: the defaults);
                                 keys: max_split_size (bytes or none), release_before_growing,
                                 wait_before_growing, growable_segments (0/1), max_streams
  --cap BYTES                    report the first request that would fail above BYTES reserved
  --json                         print the reports as JSON
  --max-errors N                 report up to N lines not in the format, then stop (default
                                 20); a trace with such lines gets no report
  -h, --help                     print this help
  -V, --version                  print the version

exit status: 0 replayed, 2 the command line is refused or FILE cannot be read or parsed
",
};

/// The longest line read; a longer one is an error, so a file without line ends is not read
/// whole into memory.
const MAX_LINE: usize = 4096;

/// What the command line asks for.
struct Options {
    configs: Vec<ReplayConfig>,
    cap: Option<usize>,
    json: bool,
    max_errors: u64,
    file: OsString,
}

fn main() -> ExitCode {
    let options = match parse_args() {
        Ok(options) => options,
        Err(stop) => return TOOL.stop(stop),
    };
    match run(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("gpu-alloc-replay: {message}");
            ExitCode::from(USAGE_ERROR)
        }
    }
}

/// The options, or why the tool stops first (help, version, a refusal).
fn parse_args() -> Result<Options, Stop> {
    use lexopt::prelude::*;
    let mut parser = lexopt::Parser::from_env();
    let (mut configs, mut cap, mut json, mut file) = (Vec::new(), None, false, None);
    let mut max_errors = ErrorBudget::DEFAULT;
    while let Some(arg) = parser.next()? {
        match arg {
            Long("config") => {
                let spec = parser.value()?.string()?;
                configs.push(config(&spec).map_err(lexopt::Error::from)?);
            }
            Long("cap") => cap = Some(parser.value()?.parse::<usize>()?),
            Long("json") => json = true,
            Long("max-errors") => max_errors = parser.value()?.parse()?,
            Value(value) if file.is_none() => file = Some(value),
            other => return Err(TOOL.common(other)),
        }
    }
    let file = file.ok_or_else(|| lexopt::Error::from("no trace file given"))?;
    Ok(Options {
        configs,
        cap,
        json,
        max_errors,
        file,
    })
}

/// A configuration from `NAME[:KEY=VALUE,...]`.
fn config(spec: &str) -> Result<ReplayConfig, String> {
    let (name, settings) = spec.split_once(':').unwrap_or((spec, ""));
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
    if name.is_empty() || !name.chars().all(plain) {
        return Err(format!(
            "--config {spec:?}: a name is letters, digits, `-`, `_` and `.`"
        ));
    }
    let mut allocator = AllocatorConfig::default();
    for setting in settings.split(',').filter(|s| !s.is_empty()) {
        let (key, value) = setting
            .split_once('=')
            .ok_or_else(|| format!("--config {spec:?}: `{setting}` is not KEY=VALUE"))?;
        allocator.set(key, value).map_err(|e| match e {
            Error::TraceSyntax { expected, .. } => {
                format!("--config {spec:?}: `{setting}`: expected {expected}")
            }
            other => format!("--config {spec:?}: {other}"),
        })?;
    }
    Ok(ReplayConfig {
        name: name.into(),
        allocator,
    })
}

/// Replays the file under every configuration and prints the report.
fn run(options: &Options) -> Result<(), String> {
    let path = options.file.to_string_lossy();
    let input =
        gpu_runtime::cli::open(&options.file).map_err(|e| format!("cannot read {path}: {e}"))?;
    let mut reader = LineReader::new(input, MAX_LINE);
    let mut replay = Replay::new(options.configs.clone(), options.cap);
    let started = Instant::now();
    let mut budget = ErrorBudget::new(options.max_errors);
    let mut err = io::stderr().lock();
    loop {
        let line = match reader.next_line() {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(e) => return Err(format!("{path}:{}: {e}", replay.lines() + 1)),
        };
        // A line not in the format changes nothing: the next ones are read for more errors.
        let message = match replay.feed_line(line.text) {
            Ok(()) => continue,
            Err(Error::TraceSyntax {
                expected, found, ..
            // The parser already shows the field's bytes visibly (`\xNN`), shortened.
            }) => format!("expected {expected}, found `{found}`"),
            Err(other) => other.to_string(),
        };
        if budget.take() {
            let at = Located {
                file: &path,
                line: replay.lines() as u64,
                message,
            };
            // A closed standard error leaves nothing to report to.
            let _ = writeln!(err, "{}: {at}", TOOL.name);
        }
        if budget.spent() {
            break;
        }
    }
    if budget.reported() > 0 {
        return Err(format!(
            "{path}: {} line(s) not in the format: no report",
            budget.reported()
        ));
    }
    let seconds = started.elapsed().as_secs_f64();
    let events = replay.events();
    let reports = replay.finish();
    let mut out = io::stdout().lock();
    let written = if options.json {
        write_json(&mut out, events, &reports)
    } else {
        write_table(&mut out, &path, events, seconds, &reports)
    };
    written.map_err(|e| format!("cannot write the report: {e}"))
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

fn write_table(
    out: &mut impl Write,
    path: &str,
    events: u64,
    seconds: f64,
    reports: &[ReplayReport],
) -> io::Result<()> {
    writeln!(
        out,
        "{path}: {events} events replayed under {} configuration(s) in {seconds:.2} s",
        reports.len()
    )?;
    writeln!(
        out,
        "| config | device | peak reserved | peak live | fragmentation | driver allocations | \
         driver frees | cache hits | misses | first failure under the cap |"
    )?;
    writeln!(out, "|---|---|---|---|---|---|---|---|---|---|")?;
    for report in reports {
        let failure = report.first_failure.as_ref().map_or_else(
            || "none".to_string(),
            |f| {
                format!(
                    "line {}: id {} ({} bytes on device {}; {:.1} MiB reserved, {:.1} MiB \
                     allocated); {} failed in all",
                    f.line,
                    f.id,
                    f.size,
                    f.device,
                    mib(f.reserved),
                    mib(f.allocated),
                    report.failures
                )
            },
        );
        for (device, stats) in &report.devices {
            writeln!(
                out,
                "| {} | {} | {:.1} MiB | {:.1} MiB | {:.3} | {} | {} | {} | {} | {failure} |",
                report.name,
                device.0,
                mib(stats.peak_reserved),
                mib(stats.peak_requested),
                stats.fragmentation(),
                stats.segment_allocations + stats.maps,
                stats.segment_frees + stats.unmaps,
                stats.hits + stats.cross_stream_hits,
                stats.misses
            )?;
        }
    }
    Ok(())
}

/// The report as one JSON object (for scripts: `clients/torch/replay_check.py`).
fn write_json(out: &mut impl Write, events: u64, reports: &[ReplayReport]) -> io::Result<()> {
    write!(out, "{{\"events\": {events}, \"configs\": [")?;
    for (index, report) in reports.iter().enumerate() {
        let separator = if index == 0 { "" } else { ", " };
        // Names are letters, digits, `-`, `_` and `.` (checked): quoted as they are.
        write!(
            out,
            "{separator}{{\"name\": {:?}, \"failures\": {}, \"first_failure\": ",
            report.name, report.failures
        )?;
        match &report.first_failure {
            Some(f) => write!(
                out,
                "{{\"line\": {}, \"id\": {}, \"device\": {}, \"size\": {}, \"reserved\": {}, \
                 \"allocated\": {}}}",
                f.line, f.id, f.device, f.size, f.reserved, f.allocated
            )?,
            None => write!(out, "null")?,
        }
        write!(out, ", \"devices\": [")?;
        for (position, (device, s)) in report.devices.iter().enumerate() {
            let separator = if position == 0 { "" } else { ", " };
            write!(
                out,
                "{separator}{{\"device\": {}, \"peak_reserved\": {}, \"peak_requested\": {}, \
                 \"peak_allocated\": {}, \"fragmentation\": {:.6}, \"driver_allocations\": {}, \
                 \"driver_frees\": {}, \"hits\": {}, \"cross_stream_hits\": {}, \"misses\": {}, \
                 \"maps\": {}, \"unmaps\": {}}}",
                device.0,
                s.peak_reserved,
                s.peak_requested,
                s.peak_allocated,
                s.fragmentation(),
                s.segment_allocations + s.maps,
                s.segment_frees + s.unmaps,
                s.hits,
                s.cross_stream_hits,
                s.misses,
                s.maps,
                s.unmaps
            )?;
        }
        write!(out, "]}}")?;
    }
    writeln!(out, "]}}")
}
