//! The token planner on programs from the fuzzer, checked by the reference model: the same
//! harness as the property test (`gpu_core::token::model`), another driver.
#![no_main]

use arbitrary::Arbitrary;
use gpu_core::token::model::{Instr, check_program};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Step {
    Run(u8, Vec<u16>),
    Join(Vec<u16>),
    Fork(u16, u8),
    ForkDetached(u16, u8),
    Wait(u16),
    Discard(u16),
    Misuse(u8, u16),
    EndProgram,
}

#[derive(Arbitrary, Debug)]
struct Program {
    devices: u8,
    seed: u64,
    steps: Vec<Step>,
}

fuzz_target!(|program: Program| {
    let instrs: Vec<Instr> = program
        .steps
        .into_iter()
        .take(256)
        .map(|step| match step {
            Step::Run(device, mut deps) => {
                deps.truncate(8);
                Instr::Run { device, deps }
            }
            Step::Join(mut deps) => {
                deps.truncate(8);
                Instr::Join { deps }
            }
            Step::Fork(token, count) => Instr::Fork {
                token,
                count: count % 8,
            },
            Step::ForkDetached(token, count) => Instr::ForkDetached {
                token,
                count: count % 8,
            },
            Step::Wait(token) => Instr::Wait { token },
            Step::Discard(token) => Instr::Discard { token },
            Step::Misuse(kind, token) => Instr::Misuse { kind, token },
            Step::EndProgram => Instr::EndProgram,
        })
        .collect();
    let devices = 1 + usize::from(program.devices % 3);
    if let Err(problem) = check_program(devices, &instrs, program.seed) {
        panic!("{problem}");
    }
});
