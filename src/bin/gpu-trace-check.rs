//! Checks a stream/event trace file (one call per line; the format is in the README's "Trace
//! format" section) and prints every defect with its line: leaks, double destroys, uses
//! after destroy, waits on events never recorded, records and launches on the wrong device.
//!
//! Usage: `gpu-trace-check FILE` (`-` reads standard input). Exit status: 0 when the trace
//! is clean, 1 when it has defects, 2 when it cannot be read or parsed.

use std::ffi::OsString;
use std::io::Read;
use std::process::ExitCode;

use gpu_runtime::token::parse_trace;

const USAGE: &str = "usage: gpu-trace-check FILE   (FILE `-` reads standard input)";

fn main() -> ExitCode {
    // Paths need not be Unicode: `args` would panic on one that is not.
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let [file] = args.as_slice() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let path = file.to_string_lossy();
    let text = if file == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).map(|_| text)
    } else {
        std::fs::read_to_string(file)
    };
    let text = match text {
        Ok(text) => text,
        Err(e) => {
            eprintln!("gpu-trace-check: cannot read {path}: {e}");
            return ExitCode::from(2);
        }
    };
    let trace = match parse_trace(&text) {
        Ok(trace) => trace,
        Err(e) => {
            eprintln!("gpu-trace-check: {path}: {e}");
            return ExitCode::from(2);
        }
    };
    let defects = trace.check();
    for defect in &defects {
        println!("{path}: {}", trace.describe(defect));
    }
    if defects.is_empty() {
        println!("{path}: {} calls, no defects", trace.ops.len());
        ExitCode::SUCCESS
    } else {
        println!(
            "{path}: {} defect(s) in {} calls",
            defects.len(),
            trace.ops.len()
        );
        ExitCode::FAILURE
    }
}
