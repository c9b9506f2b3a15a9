//! Buffers: allocate one of any kind (synchronously or in stream order) with known bytes,
//! free one, trim the caches, and verify a buffer's bytes against the host copy.

use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::Backend;
use gpu_core::token::Token;

use super::config::MAX_OWNED;
use super::thread::{Owned, Thread};

impl<'a, B: Backend> Thread<'a, B> {
    pub(super) fn alloc(&mut self) {
        if self.owned.len() >= MAX_OWNED {
            return self.free();
        }
        let device = self.device();
        let Ok(info) = self.rt.device_info(device) else {
            return self.fail(format!("device_info({device}) failed"));
        };
        let caps = info.allocator;
        let kinds: Vec<(MemoryKind, bool)> = [
            (MemoryKind::Device, caps.device),
            (MemoryKind::Managed, caps.managed),
            (MemoryKind::HostPinned, caps.host_pinned),
        ]
        .into_iter()
        .filter(|(_, support)| support.available)
        .map(|(kind, support)| (kind, support.stream_ordered))
        .collect();
        if kinds.is_empty() {
            return self.fail(format!("{device} offers no memory kind"));
        }
        let (kind, ordered) = kinds[self.rng.below(kinds.len())];
        let size = self.size();
        let rt = self.rt;
        let (buffer, token) = if ordered && self.rng.chance(2) {
            let allocated = rt.alloc_after(device, kind, size, &mut Vec::new());
            let Some((buffer, token)) = self.ok("stream-ordered allocation", allocated) else {
                return;
            };
            self.counts.stream_ordered_allocs += 1;
            (buffer, Some(token))
        } else {
            let Some(buffer) = self.ok("allocation", rt.alloc(device, kind, size)) else {
                return;
            };
            (buffer, None)
        };
        self.counts.allocs += 1;
        let value = self.rng.next_u64() as u8;
        let fill_on = if kind == MemoryKind::Device {
            device
        } else {
            self.device()
        };
        let mut after: Vec<Token> = token.into_iter().collect();
        let filled = rt.fill(fill_on, buffer.all(), value, &mut after);
        self.owned.push(Owned {
            buffer,
            expect: vec![value; size],
            token: None,
        });
        let index = self.owned.len() - 1;
        if filled.is_ok() {
            self.counts.fills += 1;
        }
        // Until the fill succeeds the bytes are unknown.
        self.finish_or_forget("fill of a new buffer", index, after, filled);
    }

    pub(super) fn free(&mut self) {
        let index = self.pick();
        let owned = self.owned.swap_remove(index);
        self.release(owned);
    }

    pub(super) fn trim(&mut self) {
        if self.config.trims && self.rng.chance(8) {
            let trimmed = self.rt.trim();
            if self.ok("trim", trimmed).is_some() {
                self.counts.trims += 1;
            }
        } else {
            self.verify();
        }
    }

    /// Reads a buffer back (after its last work) and compares every byte with the host copy.
    pub(super) fn verify(&mut self) {
        let index = self.pick();
        let device = self.device_for(index);
        let mut after = self.take_token(index);
        let size = self.owned[index].buffer.size();
        let mut read = vec![0u8; size];
        let rt = self.rt;
        let owned = &self.owned[index];
        let result = if owned.buffer.kind() == MemoryKind::Device {
            rt.download(device, &mut read, owned.buffer.all(), &mut after)
        } else {
            after
                .drain(..)
                .try_for_each(|token| rt.wait(token))
                // SAFETY: the buffer's last work has completed and this thread enqueues none.
                .and_then(|()| unsafe { owned.buffer.read_host(0, &mut read) })
        };
        if self.ok("read back", result).is_none() {
            self.settle(after);
            return self.drop_owned(&[index]);
        }
        let owned = &self.owned[index];
        match read.iter().zip(&owned.expect).position(|(a, b)| a != b) {
            None => {
                self.counts.verified += 1;
                self.counts.verified_bytes += size as u64;
            }
            Some(at) => {
                let why = format!(
                    "{:?} buffer of {size} bytes on {}: byte {at} is {}, expected {}",
                    owned.buffer.kind(),
                    owned.buffer.device(),
                    read[at],
                    owned.expect[at]
                );
                self.fail(why);
                // Reset the host copy so one corruption is reported once.
                self.owned[index].expect = read;
            }
        }
    }
}
