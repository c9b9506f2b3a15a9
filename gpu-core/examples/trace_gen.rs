//! Writes a synthetic recorder-style trace (see `gpu_core::token::synthetic`) for measuring
//! `gpu-trace-check` end to end.
//!
//! Usage: `cargo run --release -p gpu-core --example trace_gen -- FILE CALLS [SEED]`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::process::ExitCode;

use gpu_core::token::synthetic::SyntheticTrace;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(path), Some(Ok(calls))) = (args.first(), args.get(1).map(|n| n.parse::<u64>()))
    else {
        eprintln!("usage: trace_gen FILE CALLS [SEED]");
        return ExitCode::from(2);
    };
    let seed = match args.get(2).map(|n| n.parse::<u64>()) {
        None => 1,
        Some(Ok(seed)) => seed,
        Some(Err(e)) => {
            eprintln!("trace_gen: SEED: {e}");
            return ExitCode::from(2);
        }
    };
    let written = File::create(path).and_then(|file| {
        let mut out = BufWriter::new(file);
        let mut trace = SyntheticTrace::new(seed, calls);
        let mut line = String::new();
        while trace.next_line(&mut line) {
            out.write_all(line.as_bytes())?;
            out.write_all(b"\n")?;
        }
        out.flush()
    });
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("trace_gen: cannot write {path}: {e}");
            ExitCode::FAILURE
        }
    }
}
