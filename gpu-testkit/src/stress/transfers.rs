//! Transfers: fill a range, copy between two owned buffers (any devices and kinds), and
//! upload from the arena, pinned or not, or from memory locked for the one copy.

use alloc::vec::Vec;

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::Backend;
use gpu_core::error::Result;
use gpu_core::id::DeviceId;
use gpu_core::token::Token;
use gpu_rt::runtime::Buffer;

use super::thread::{ARENA, Thread};

impl<'a, B: Backend> Thread<'a, B> {
    pub(super) fn fill(&mut self) {
        let index = self.pick();
        let device = self.device_for(index);
        let size = self.owned[index].buffer.size();
        let (offset, len) = self.range(size, size);
        let value = self.rng.next_u64() as u8;
        let mut after = self.take_token(index);
        let filled = match self.owned[index].buffer.span(offset, len) {
            Ok(span) => self.rt.fill(device, span, value, &mut after),
            Err(e) => Err(e),
        };
        if filled.is_ok() {
            self.counts.fills += 1;
            self.owned[index].expect[offset..offset + len].fill(value);
        }
        self.finish("fill", &[index], after, filled);
    }

    pub(super) fn copy(&mut self) {
        if self.owned.len() < 2 {
            return self.alloc();
        }
        let dst = self.pick();
        let src = (dst + 1 + self.rng.below(self.owned.len() - 1)) % self.owned.len();
        let on_device = |b: &Buffer<'_, B>| (b.kind() == MemoryKind::Device).then(|| b.device());
        let (dst_buffer, src_buffer) = (&self.owned[dst].buffer, &self.owned[src].buffer);
        let (dst_device, src_device) = (on_device(dst_buffer), on_device(src_buffer));
        let (dst_size, src_size) = (dst_buffer.size(), src_buffer.size());
        let peer = matches!((dst_device, src_device), (Some(a), Some(b)) if a != b);
        let device = match dst_device.or(src_device) {
            Some(device) => device,
            None => self.device(),
        };
        let (at, len) = self.range(dst_size, src_size);
        let from = self.rng.below(src_size - len + 1);
        let mut after = self.take_token(dst);
        after.extend(self.take_token(src));
        let (dst_owned, src_owned) = (&self.owned[dst], &self.owned[src]);
        let copied = dst_owned
            .buffer
            .span(at, len)
            .and_then(|d| Ok((d, src_owned.buffer.span(from, len)?)))
            .and_then(|(d, s)| self.rt.copy(device, d, s, &mut after));
        if copied.is_ok() {
            if peer {
                self.counts.peer_copies += 1;
            } else {
                self.counts.copies += 1;
            }
            let bytes = self.owned[src].expect[from..from + len].to_vec();
            self.owned[dst].expect[at..at + len].copy_from_slice(&bytes);
        }
        self.finish("copy", &[dst, src], after, copied);
    }

    /// Uploads part of the arena (through the lock table's fast path when that part is
    /// locked), or of memory locked for this one copy.
    pub(super) fn upload(&mut self) {
        let index = self.pick();
        let device = self.device_for(index);
        let size = self.owned[index].buffer.size();
        let (at, len) = self.range(size, ARENA);
        let mut after = self.take_token(index);
        let rt = self.rt;
        let (copied, source) = if self.rng.chance(3) {
            let mut memory: Vec<u8> = (0..len).map(|_| self.rng.next_u64() as u8).collect();
            let source = memory.clone();
            (
                self.copy_locked(index, device, at, &mut memory, &mut after),
                source,
            )
        } else {
            let from = self.rng.below(ARENA - len + 1);
            let source = &self.arena[from..from + len];
            let result = self.owned[index]
                .buffer
                .span(at, len)
                .and_then(|span| rt.upload(device, span, source, &mut after));
            (result, source.to_vec())
        };
        if copied.is_ok() {
            self.counts.uploads += 1;
            self.owned[index].expect[at..at + len].copy_from_slice(&source);
        }
        self.finish_or_forget("upload", index, after, copied);
    }

    /// Pins `memory` for one copy into buffer `index` at `at`, then unpins it (which waits
    /// for the copy).
    fn copy_locked(
        &mut self,
        index: usize,
        device: DeviceId,
        at: usize,
        memory: &mut [u8],
        after: &mut Vec<Token>,
    ) -> Result<Token> {
        let len = memory.len();
        let locked = self.rt.lock_host(memory)?;
        let copied = self.owned[index]
            .buffer
            .span(at, len)
            .and_then(|dst| self.rt.copy(device, dst, locked.span(0, len)?, after));
        let unlocked = locked.unlock();
        match (copied, unlocked) {
            (Ok(token), Ok(())) => Ok(token),
            (Ok(token), Err(e)) => {
                // The copy ran (unlock waited for it) but the unpin failed: wait the token too.
                after.push(token);
                Err(e)
            }
            (Err(e), _) => Err(e),
        }
    }
}
