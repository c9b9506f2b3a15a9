//! Kernel launches: `fill_u32` and `workgroup_reverse_u32` on owned buffers, checked by the
//! host copy each predicts.

use alloc::vec::Vec;

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::{Backend, LaunchDims};
use gpu_core::error::Result;
use gpu_core::id::DeviceId;
use gpu_core::token::Token;
use gpu_rt::runtime::Arg;

use super::thread::Thread;

/// What a launch may work on: buffer `index`, which holds `words` words, from `device`.
#[derive(Clone, Copy)]
struct Target {
    index: usize,
    device: DeviceId,
    words: usize,
}

impl<'a, B: Backend> Thread<'a, B> {
    pub(super) fn launch(&mut self) {
        let candidates: Vec<usize> = (0..self.owned.len())
            .filter(|&i| {
                matches!(
                    self.owned[i].buffer.kind(),
                    MemoryKind::Device | MemoryKind::Managed
                )
            })
            .collect();
        if candidates.is_empty() {
            return self.fill();
        }
        let index = candidates[self.rng.below(candidates.len())];
        let device = self.device_for(index);
        let size = self.owned[index].buffer.size();
        let words = size / 4;
        if words == 0 {
            return self.fill();
        }
        let mut after = self.take_token(index);
        let target = Target {
            index,
            device,
            words,
        };
        let launched = if self.rng.chance(2) {
            self.launch_fill(target, &mut after)
        } else {
            self.launch_reverse(target, &mut after)
        };
        if launched.is_ok() {
            self.counts.launches += 1;
        }
        self.finish("launch", &[index], after, launched);
    }

    /// `fill_u32` over some words of buffer `index`; the host copy follows on success.
    fn launch_fill(&mut self, target: Target, after: &mut Vec<Token>) -> Result<Token> {
        let (index, device, words) = (target.index, target.device, target.words);
        let count = 1 + self.rng.below(words);
        let first = self.rng.below(words - count + 1);
        let value = self.rng.next_u64() as u32;
        let rt = self.rt;
        let owned = &mut self.owned[index];
        let span = owned.buffer.span(first * 4, count * 4)?;
        let kernel = rt.kernel(device, "fill_u32")?;
        let args = [Arg::Span(span), Arg::U32(value), Arg::U64(count as u64)];
        let grid = count.div_ceil(256).min(64) as u32;
        // SAFETY: fill_u32 writes `count` words from the span's start: the span's length.
        let token = unsafe { kernel.launch(LaunchDims::linear(grid, 256), &args, after) }?;
        for word in owned.expect[first * 4..(first + count) * 4].chunks_exact_mut(4) {
            word.copy_from_slice(&value.to_ne_bytes());
        }
        Ok(token)
    }

    /// `workgroup_reverse_u32` over groups of words of buffer `index` (some above the default
    /// workgroup limit, which needs the opt-in); the host copy follows on success.
    fn launch_reverse(&mut self, target: Target, after: &mut Vec<Token>) -> Result<Token> {
        let (index, device, words) = (target.index, target.device, target.words);
        let per_group = [16usize, 256, 4096, 16384][self.rng.below(4)].min(words);
        let groups = (words / per_group).min(8);
        let rt = self.rt;
        let owned = &mut self.owned[index];
        let span = owned.buffer.span(0, groups * per_group * 4)?;
        let kernel = rt.kernel(device, "workgroup_reverse_u32")?;
        let dims = LaunchDims {
            dynamic_workgroup_bytes: (per_group * 4) as u32,
            ..LaunchDims::linear(groups as u32, 128)
        };
        let args = [Arg::Span(span), Arg::U32(per_group as u32)];
        // SAFETY: group g touches words [g * per_group, (g + 1) * per_group) of the span, which
        // holds `groups * per_group` words.
        let token = unsafe { kernel.launch(dims, &args, after) }?;
        for group in owned.expect[..groups * per_group * 4].chunks_exact_mut(per_group * 4) {
            let old: Vec<u32> = group
                .chunks_exact(4)
                .map(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]))
                .collect();
            for (i, word) in group.chunks_exact_mut(4).enumerate() {
                let value = old[per_group - 1 - i].wrapping_add(1);
                word.copy_from_slice(&value.to_ne_bytes());
            }
        }
        Ok(token)
    }
}
