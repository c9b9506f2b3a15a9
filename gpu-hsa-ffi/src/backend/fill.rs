//! Fills of 8-, 16- or 32-bit elements: the plan that splits one into work HSA can order on a
//! stream, and the backend method that enqueues that work.
//!
//! The 4-byte aligned middle runs as the `fill_u32` kernel (hsa_amd_memory_fill is
//! synchronous), the few bytes before and after it as copies from a small host buffer holding
//! the pattern.

use gpu_core::backend::library::find_for;
use gpu_core::backend::{FillValue, KernelArg, LaunchDims};
use gpu_core::{Error, Result};

use super::pools::CopyAgents;
use super::{HsaBackend, HsaStream, lock};
use crate::result::{BACKEND, driver_error};
use crate::sys;

/// Workgroups of the `fill_u32` kernel at most (it strides over the rest).
const FILL_GROUPS: u64 = 1024;

/// Work-items per workgroup of the `fill_u32` kernel.
const FILL_BLOCK: u32 = 256;

/// A few bytes at `dst` copied from the start of the pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EdgeCopy {
    /// The first byte written.
    pub(crate) dst: usize,
    /// How many (1 to 3).
    pub(crate) bytes: usize,
}

/// The pieces of one fill, each empty part left out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FillPlan {
    /// The value repeated over 4 bytes, little-endian: what every aligned word gets.
    pub(crate) pattern: u32,
    /// The bytes before the first 4-byte aligned address.
    pub(crate) head: Option<EdgeCopy>,
    /// The aligned words: their first address and how many.
    pub(crate) words: Option<(usize, u64)>,
    /// The bytes after the last whole word.
    pub(crate) tail: Option<EdgeCopy>,
}

/// The error for a fill whose address is not aligned to its elements (as a driver's memset
/// of 16- or 32-bit elements refuses it).
fn misaligned() -> Error {
    Error::Driver(driver_error(
        "fill_elements (address not aligned to the element width)",
        sys::HSA_STATUS_ERROR_INVALID_ARGUMENT,
    ))
}

/// Splits a fill of `count` elements of `value` at `dst` into edge copies and aligned words.
/// Each element width divides 4, and `dst` is a multiple of the width, so the pattern's phase
/// at every 4-byte aligned address is the same as at `dst`.
///
/// # Errors
/// [`Error::ZeroSize`] for no element; an [`Error::Driver`] with
/// `HSA_STATUS_ERROR_INVALID_ARGUMENT` for an address not aligned to the element width;
/// [`Error::AddressOverflow`] when the range passes the end of the address space.
pub(crate) fn plan_fill(dst: usize, value: FillValue, count: usize) -> Result<FillPlan> {
    let width = value.width();
    if count == 0 {
        return Err(Error::ZeroSize { what: "fill size" });
    }
    if !dst.is_multiple_of(width) {
        return Err(misaligned());
    }
    let bytes = count
        .checked_mul(width)
        .filter(|&bytes| dst.checked_add(bytes).is_some())
        .ok_or(Error::AddressOverflow {
            ptr: dst,
            len: count.saturating_mul(width),
        })?;
    let pattern = match value {
        FillValue::U8(v) => u32::from_le_bytes([v; 4]),
        FillValue::U16(v) => u32::from(v) | (u32::from(v) << 16),
        FillValue::U32(v) => v,
    };
    let head_bytes = ((4 - dst % 4) % 4).min(bytes);
    let words = (bytes - head_bytes) / 4;
    let tail_bytes = bytes - head_bytes - words * 4;
    let edge = |dst, bytes| (bytes > 0).then_some(EdgeCopy { dst, bytes });
    let words_start = dst + head_bytes;
    Ok(FillPlan {
        pattern,
        head: edge(dst, head_bytes),
        words: (words > 0).then_some((words_start, words as u64)),
        tail: edge(words_start + words * 4, tail_bytes),
    })
}

impl HsaBackend {
    /// [`Backend::fill_elements`](gpu_core::backend::Backend::fill_elements): the plan's
    /// aligned words by the `fill_u32` kernel, its head and tail copied from a host buffer
    /// holding the pattern.
    ///
    /// # Safety
    /// The trait's.
    pub(super) unsafe fn fill_on_stream(
        &self,
        stream: HsaStream,
        dst: usize,
        value: FillValue,
        count: usize,
    ) -> Result<()> {
        let state = self.stream_state(stream)?;
        let plan = plan_fill(dst, value, count)?;
        if let Some((start, words)) = plan.words {
            let kernel = self.library_kernel(stream.device, find_for(BACKEND, "fill_u32")?)?;
            let groups = words.div_ceil(u64::from(FILL_BLOCK)).min(FILL_GROUPS) as u32;
            let args = [
                KernelArg::Ptr(start),
                KernelArg::U32(plan.pattern),
                KernelArg::U64(words),
            ];
            // SAFETY: the caller's promise for the range the words lie in.
            unsafe {
                self.enqueue_dispatch(
                    stream,
                    kernel,
                    LaunchDims::linear(groups, FILL_BLOCK),
                    &args,
                )?
            };
        }
        for edge in [plan.head, plan.tail].into_iter().flatten() {
            let scratch = self.scratch(&plan.pattern.to_le_bytes()[..edge.bytes])?;
            let source = scratch.unwrap_or(0);
            // SAFETY: the caller's promise for the destination; the source is the backend's
            // buffer, freed when the copy's operation retires.
            unsafe {
                self.enqueue_copy(
                    &mut lock(&state),
                    CopyAgents::FromAddresses,
                    edge.dst,
                    source,
                    edge.bytes,
                    scratch,
                )?
            };
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory after the plan ran, from a page of 0xEE bytes at address `base`.
    fn run_plan(plan: &FillPlan, base: usize, page: usize) -> Vec<u8> {
        let mut memory = vec![0xEEu8; page];
        let pattern = plan.pattern.to_le_bytes();
        for edge in [plan.head, plan.tail].into_iter().flatten() {
            assert!((1..=3).contains(&edge.bytes), "{edge:?}");
            let at = edge.dst - base;
            memory[at..at + edge.bytes].copy_from_slice(&pattern[..edge.bytes]);
        }
        if let Some((start, words)) = plan.words {
            assert_eq!(start % 4, 0, "words start aligned");
            for word in 0..words as usize {
                let at = start - base + word * 4;
                memory[at..at + 4].copy_from_slice(&pattern);
            }
        }
        memory
    }

    /// The reference: a plain loop writing each element.
    fn reference(dst: usize, value: FillValue, count: usize, base: usize, page: usize) -> Vec<u8> {
        let mut memory = vec![0xEEu8; page];
        let element: Vec<u8> = match value {
            FillValue::U8(v) => vec![v],
            FillValue::U16(v) => v.to_le_bytes().to_vec(),
            FillValue::U32(v) => v.to_le_bytes().to_vec(),
        };
        for index in 0..count {
            let at = dst - base + index * element.len();
            memory[at..at + element.len()].copy_from_slice(&element);
        }
        memory
    }

    #[test]
    fn every_small_fill_matches_an_element_by_element_loop() {
        let base = 0x1000;
        let page = 64;
        for value in [
            FillValue::U8(0x5A),
            FillValue::U16(0xBEEF),
            FillValue::U32(0x0102_0304),
        ] {
            let width = value.width();
            for offset in (0..8).filter(|o| o % width == 0) {
                for count in 1..=(40 / width) {
                    let dst = base + offset;
                    let plan = plan_fill(dst, value, count).unwrap();
                    assert_eq!(
                        run_plan(&plan, base, page),
                        reference(dst, value, count, base, page),
                        "{value:?} at +{offset}, {count} elements: {plan:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_large_aligned_fill_is_one_kernel_and_no_copy() {
        let plan = plan_fill(0x10_0000, FillValue::U8(0), 1 << 20).unwrap();
        assert_eq!(plan.head, None);
        assert_eq!(plan.tail, None);
        assert_eq!(plan.words, Some((0x10_0000, 1 << 18)));
    }

    #[test]
    fn bad_fills_are_typed_errors() {
        assert_eq!(
            plan_fill(0x1000, FillValue::U8(1), 0),
            Err(Error::ZeroSize { what: "fill size" })
        );
        assert_eq!(plan_fill(0x1001, FillValue::U16(1), 4), Err(misaligned()));
        assert_eq!(plan_fill(0x1002, FillValue::U32(1), 4), Err(misaligned()));
        assert!(matches!(
            plan_fill(usize::MAX - 3, FillValue::U32(1), 2),
            Err(Error::AddressOverflow { .. })
        ));
        assert!(matches!(
            plan_fill(0, FillValue::U32(1), usize::MAX / 2),
            Err(Error::AddressOverflow { .. })
        ));
    }
}
