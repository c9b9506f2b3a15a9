//! Random programs of fills, copies and library kernel launches over a few operands of `WORDS`
//! words, and what they do to plain vectors: the model the graph tests check replays against;
//! and the check of a list of refused recordings.

use gpu_rt::runtime::{Buffer, Runtime};
use proptest::prelude::*;

/// Words in each operand.
pub(crate) const WORDS: usize = 64;

/// `buffer`'s words, downloaded.
pub(crate) fn words<B: gpu_core::backend::Backend>(
    rt: &Runtime<B>,
    buffer: &Buffer<'_, B>,
) -> Vec<u32> {
    let mut back = vec![0u8; buffer.size()];
    rt.download(buffer.device(), &mut back, buffer.all(), &mut vec![])
        .unwrap();
    back.chunks(4)
        .map(|w| u32::from_ne_bytes(w.try_into().unwrap()))
        .collect()
}

/// One operation of a random program over operands numbered from 0.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Op {
    Fill {
        dst: usize,
        value: u32,
    },
    Copy {
        dst: usize,
        src: usize,
    },
    /// `fill_u32` over the first `count` words.
    Kernel {
        dst: usize,
        value: u32,
        count: usize,
    },
}

impl Op {
    /// The operands it touches.
    pub(crate) fn operands(&self) -> Vec<usize> {
        match *self {
            Op::Fill { dst, .. } | Op::Kernel { dst, .. } => vec![dst],
            Op::Copy { dst, src } => vec![dst, src],
        }
    }

    /// What the operation does to plain vectors.
    pub(crate) fn apply(&self, model: &mut [Vec<u32>]) {
        match *self {
            Op::Fill { dst, value } => model[dst].fill(value),
            Op::Copy { dst, src } => model[dst] = model[src].clone(),
            Op::Kernel { dst, value, count } => model[dst][..count].fill(value),
        }
    }
}

/// An operation over `operands` operands (a copy's two are different).
pub(crate) fn op(operands: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..operands, any::<u32>()).prop_map(|(dst, value)| Op::Fill { dst, value }),
        (0..operands, 1..operands).prop_map(move |(dst, shift)| Op::Copy {
            dst,
            src: (dst + shift) % operands
        }),
        (0..operands, any::<u32>(), 1..=WORDS).prop_map(|(dst, value, count)| Op::Kernel {
            dst,
            value,
            count
        }),
    ]
}

/// Asserts that `results`, recordings that must all be refused, failed with errors matching
/// `patterns`, one each, in order (a result that succeeded, or one pattern too many or too
/// few, fails too).
macro_rules! assert_refused {
    ($results:expr, [$($pattern:pat),* $(,)?]) => {{
        let errors: Vec<gpu_core::Error> =
            $results.into_iter().map(Result::unwrap_err).collect();
        let patterns = [$(stringify!($pattern)),*];
        assert_eq!(errors.len(), patterns.len(), "refusals: {errors:?}");
        let mut index = 0;
        $(
            assert!(
                matches!(errors[index], $pattern),
                "refusal {index}: {}, expected {}",
                errors[index],
                patterns[index]
            );
            index += 1;
        )*
        let _ = index;
    }};
}
pub(crate) use assert_refused;
