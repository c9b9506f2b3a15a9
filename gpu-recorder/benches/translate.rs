//! The recorder's per-call cost on the CPU: translating a launch into its trace line, beside
//! the least any text trace pays (formatting the same line with `writeln!`), in one run; and a
//! launch with four parameter words looked up among 1,000 live allocations (its footprint).

use std::fmt::Write as _;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use gpu_recorder::{Call, Kind, Outcome, Translator};

fn launches(c: &mut Criterion) {
    let call = Call {
        function: "cuLaunchKernel",
        kind: Kind::Work {
            stream: 0x5591_08ef_5700,
        },
        context: 0x5591_080e_a7e0,
        device: Some(0),
        thread: 525,
        outcome: Outcome::Returned(0),
        args: Vec::new(),
    };
    let mut group = c.benchmark_group("launch_line");
    group.bench_function("translator", |b| {
        let mut translator = Translator::new();
        let mut out = String::with_capacity(256);
        b.iter(|| {
            translator.translate(black_box(&call), &mut out);
            out.clear();
        });
    });
    group.bench_function("baseline_writeln", |b| {
        let mut out = String::with_capacity(256);
        b.iter(|| {
            let call = black_box(&call);
            if let Kind::Work { stream } = call.kind {
                let _ = writeln!(
                    out,
                    "launch {stream:#x}  # {} tid={}",
                    call.function, call.thread
                );
            }
            out.clear();
        });
    });
    group.bench_function("translator_footprint", |b| {
        let mut translator = Translator::new();
        let mut out = String::with_capacity(256);
        for i in 0..1000u64 {
            let alloc = Call {
                function: "cuMemAlloc_v2",
                kind: Kind::Alloc {
                    address: 0x7f00_0000_0000 + i * 0x10_0000,
                    bytes: 0x8_0000,
                },
                ..call.clone()
            };
            translator.translate(&alloc, &mut out);
        }
        out.clear();
        let launch = Call {
            kind: Kind::Launch {
                stream: 0x5591_08ef_5700,
                function: 0xf1,
            },
            args: vec![0x7f00_0320_0040, 0x4000, 0x7f00_0640_0000, 0x7f00_0000_0008],
            ..call.clone()
        };
        b.iter(|| {
            translator.translate(black_box(&launch), &mut out);
            out.clear();
        });
    });
    group.finish();
}

criterion_group!(benches, launches);
criterion_main!(benches);
