//! Property tests of the token planner against the reference model: random token programs
//! (DAGs with forks, detached forks and joins over 1 to 3 devices, waits, discards, misuses,
//! program ends).

use gpu_core::token::model::{Instr, check_program, rerun_creations};
use proptest::prelude::*;

fn instr() -> impl Strategy<Value = Instr> {
    let deps = || prop::collection::vec(any::<u16>(), 0..4);
    prop_oneof![
        6 => (any::<u8>(), deps()).prop_map(|(device, deps)| Instr::Run { device, deps }),
        2 => prop::collection::vec(any::<u16>(), 1..5).prop_map(|deps| Instr::Join { deps }),
        3 => (any::<u16>(), 1u8..5).prop_map(|(token, count)| Instr::Fork { token, count }),
        1 => (any::<u16>(), 1u8..4)
            .prop_map(|(token, count)| Instr::ForkDetached { token, count }),
        1 => any::<u16>().prop_map(|token| Instr::Wait { token }),
        1 => any::<u16>().prop_map(|token| Instr::Discard { token }),
        1 => (any::<u8>(), any::<u16>()).prop_map(|(kind, token)| Instr::Misuse { kind, token }),
    ]
}

fn program() -> impl Strategy<Value = Vec<Instr>> {
    prop::collection::vec(instr(), 0..60)
}

proptest! {
    /// Every plan passes the checker in both views, waits exactly for the dependencies the
    /// plan does not already imply (brute-force closure), reports every unwaited token, and
    /// a simulated execution with random interleaving respects every dependency; every
    /// misuse fails with its typed error and leaves the planner unchanged.
    #[test]
    fn random_programs_plan_correctly(
        devices in 1usize..=3,
        program in program(),
        seed in any::<u64>(),
    ) {
        if let Err(problem) = check_program(devices, &program, seed) {
            prop_assert!(false, "{}", problem);
        }
    }

    /// Several programs on warm pools, with tokens left outstanding at each end.
    #[test]
    fn programs_on_warm_pools(
        devices in 1usize..=3,
        first in program(),
        second in program(),
        seed in any::<u64>(),
    ) {
        let mut both = first;
        both.push(Instr::EndProgram);
        both.extend(second);
        if let Err(problem) = check_program(devices, &both, seed) {
            prop_assert!(false, "{}", problem);
        }
    }

    /// After warm-up, streams and events come from the pools: running a single-device
    /// program again creates no stream, and at most one event (for a wait the first run
    /// found implied).
    #[test]
    fn warm_pools_create_nothing(program in program()) {
        match rerun_creations(&program) {
            Ok((streams, events)) => {
                prop_assert_eq!(streams, 0);
                prop_assert!(events <= 1, "{} events created on warm pools", events);
            }
            Err(problem) => prop_assert!(false, "{}", problem),
        }
    }
}
