//! Transfers between pageable host memory and device memory: the lock table's fast path where
//! the range is pinned, else two pinned staging buffers, so the host copy of one chunk overlaps
//! the DMA of the previous one.

use alloc::vec::Vec;

use super::state::HostWait;
use super::work::CopySource;
use super::{Buffer, Runtime, Span};
use gpu_core::allocator::MemoryKind;
use gpu_core::backend::Backend;
use gpu_core::error::{Error, Result};
use gpu_core::id::DeviceId;
use gpu_core::token::Token;

impl<B: Backend> Runtime<B> {
    /// Copies pageable host memory `src` into `dst` on `device`. Returns once `src` is no
    /// longer needed; the token stands for the device side. Memory the lock table knows as
    /// pinned is copied directly; other memory goes through two pinned staging buffers. A
    /// transfer that fails once started discards every token it holds, `after`'s included
    /// (shutdown reports them as discarded).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 256)?;
    /// let input: Vec<u8> = (0..=255).collect();
    /// let uploaded = rt.upload(DeviceId(0), buffer.all(), &input, &mut vec![])?;
    /// // `input` is no longer needed here; the token stands for the device side.
    /// let mut out = vec![0u8; 256];
    /// rt.download(DeviceId(0), &mut out, buffer.all(), &mut vec![uploaded])?;
    /// assert_eq!(out, input);
    /// let short = rt.upload(DeviceId(0), buffer.all(), &input[..10], &mut vec![]);
    /// assert!(matches!(short, Err(Error::OutOfBounds { .. }))); // lengths must match
    /// # Ok::<(), Error>(())
    /// ```
    pub fn upload(
        &self,
        device: DeviceId,
        dst: Span<'_>,
        src: &[u8],
        after: &mut Vec<Token>,
    ) -> Result<Token> {
        self.own(&dst)?;
        if dst.len != src.len() {
            return Err(Error::OutOfBounds {
                offset: 0,
                len: src.len(),
                size: dst.len,
            });
        }
        if let Some(address) = self
            .pinned_address(src.as_ptr() as usize, src.len(), device)
            .ok()
            .flatten()
        {
            // `src` stays borrowed until the copy has read it: nothing writes it meanwhile.
            let source = Span::raw(address, src.len());
            let copied = self.copy_from(device, dst, source, CopySource::ReadOnly, after)?;
            return self.keep_after_host_memory_is_read(copied);
        }
        self.staged(
            device,
            src.len(),
            after,
            |runtime, staging, offset, len, deps| {
                // SAFETY: no enqueued work uses this staging buffer: its previous copy was waited for.
                unsafe { staging.write_host(0, &src[offset..offset + len]) }?;
                runtime.copy(device, dst.sub(offset, len)?, staging.span(0, len)?, deps)
            },
        )
    }

    /// Copies `src` on `device` into pageable host memory `dst`, through two pinned staging
    /// buffers (the DMA of one chunk overlaps the host copy of the previous one). Returns once
    /// `dst` holds the data. Failures as for [`Runtime::upload`].
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2)))?;
    /// let buffer = rt.alloc(DeviceId(1), MemoryKind::Device, 1 << 20)?;
    /// let filled = rt.fill(DeviceId(1), buffer.all(), 0x11, &mut vec![])?;
    /// let mut out = vec![0u8; 1 << 20];
    /// rt.download(DeviceId(1), &mut out, buffer.all(), &mut vec![filled])?; // after the fill
    /// assert!(out.iter().all(|&byte| byte == 0x11));
    /// let mut part = [0u8; 16];
    /// rt.download(DeviceId(1), &mut part, buffer.span(64, 16)?, &mut vec![])?;
    /// assert_eq!(part, [0x11; 16]);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn download(
        &self,
        device: DeviceId,
        dst: &mut [u8],
        src: Span<'_>,
        after: &mut Vec<Token>,
    ) -> Result<()> {
        self.own(&src)?;
        if dst.len() != src.len {
            return Err(Error::OutOfBounds {
                offset: 0,
                len: src.len,
                size: dst.len(),
            });
        }
        let (chunk, staging) = self.staging_buffers(device, src.len)?;
        let mut chain = core::mem::take(after);
        let mut in_flight: Option<(Token, usize, usize, usize)> = None;
        let mut chunks = (0..src.len).step_by(chunk).enumerate();
        let mut transfer = || -> Result<()> {
            loop {
                let issued = match chunks.next() {
                    Some((index, offset)) => {
                        let (slot, len) = (index % 2, chunk.min(src.len - offset));
                        let target = staging[slot].span(0, len)?;
                        let copied =
                            self.copy(device, target, src.sub(offset, len)?, &mut chain)?;
                        let (next, done) = self.split(copied)?;
                        chain.push(next);
                        Some((done, slot, offset, len))
                    }
                    None => None,
                };
                let Some((done, slot, at, len)) = core::mem::replace(&mut in_flight, issued) else {
                    if in_flight.is_none() {
                        return Ok(());
                    }
                    continue;
                };
                self.wait(done)?;
                // SAFETY: the copy into this staging buffer has completed, and the next copy
                // into it is issued only after this host copy.
                unsafe { staging[slot].read_host(0, &mut dst[at..at + len]) }?;
            }
        };
        let transferred = transfer();
        chain.extend(in_flight.map(|(token, ..)| token));
        match transferred {
            // Every token is waited for, also after one wait failed; the first failure counts.
            Ok(()) => chain
                .into_iter()
                .map(|token| self.wait(token))
                .fold(Ok(()), Result::and),
            Err(e) => {
                self.discard(chain);
                Err(e)
            }
        }
    }

    /// Waits for the work of `token`, which reads host memory borrowed only for the call, and
    /// returns a token continuing its chain. Whatever fails (the fork, the wait), the work has
    /// finished before this returns: the host then blocks on the token's stream or event
    /// directly (tried twice), since the caller may free the memory as soon as it has the
    /// error. Found by the stress run with injected faults: a failed fork after a pinned
    /// upload let the copy read the caller's memory after it was freed.
    fn keep_after_host_memory_is_read(&self, token: Token) -> Result<Token> {
        let fallback = {
            let state = self.state.lock();
            let wait = state
                .planner
                .pending_of(&token)
                .and_then(|p| state.host_wait(&p));
            let hold = wait
                .as_ref()
                .ok()
                .and_then(HostWait::device)
                .and_then(|device| self.health.hold_host_wait(device));
            (wait, hold)
        };
        let kept = self
            .split(token)
            .and_then(|(keep, done)| self.wait(done).map(|()| keep));
        if kept.is_err()
            && let (Ok(wait), _hold) = fallback
            && wait.block(&self.backend, &self.health).is_err()
        {
            let _ = wait.block(&self.backend, &self.health);
        }
        kept
    }

    /// Forks `token` in two: one to continue the stream's chain, one to wait on.
    fn split(&self, token: Token) -> Result<(Token, Token)> {
        let mut branches = self.fork(token, 2)?.into_iter();
        match (branches.next(), branches.next()) {
            (Some(keep), Some(wait)) => Ok((keep, wait)),
            _ => Err(Error::ZeroSize {
                what: "fork branches",
            }),
        }
    }

    /// Runs `step` for each staging chunk of a `total`-byte transfer, alternating two pinned
    /// buffers, and returns the token of all the chunks' device work.
    fn staged(
        &self,
        device: DeviceId,
        total: usize,
        after: &mut Vec<Token>,
        mut step: impl FnMut(&Self, &Buffer<'_, B>, usize, usize, &mut Vec<Token>) -> Result<Token>,
    ) -> Result<Token> {
        let (chunk, staging) = self.staging_buffers(device, total)?;
        let mut chain = core::mem::take(after);
        let mut pending: [Option<Token>; 2] = [None, None];
        let mut issue = || -> Result<()> {
            for (index, offset) in (0..total).step_by(chunk).enumerate() {
                let slot = index % 2;
                if let Some(done) = pending[slot].take() {
                    self.wait(done)?;
                }
                let len = chunk.min(total - offset);
                let copied = step(self, &staging[slot], offset, len, &mut chain)?;
                let (keep, done) = self.split(copied)?;
                pending[slot] = Some(done);
                chain.push(keep);
            }
            Ok(())
        };
        let issued = issue();
        chain.extend(pending.into_iter().flatten());
        match issued.and_then(|()| self.join(&mut chain)) {
            Ok(token) => Ok(token),
            Err(e) => {
                self.discard(chain);
                Err(e)
            }
        }
    }

    /// The two pinned staging buffers of a transfer of `total` bytes, and their size.
    fn staging_buffers(
        &self,
        device: DeviceId,
        total: usize,
    ) -> Result<(usize, [Buffer<'_, B>; 2])> {
        let chunk = self.config.staging_chunk.min(total).max(1);
        let buffers = [
            self.alloc(device, MemoryKind::HostPinned, chunk)?,
            self.alloc(device, MemoryKind::HostPinned, chunk)?,
        ];
        Ok((chunk, buffers))
    }

    /// Ends tokens no one will wait for, after a failure: what they hold goes back to the
    /// pools (shutdown reports them as discarded).
    fn discard(&self, tokens: Vec<Token>) {
        if tokens.is_empty() {
            return;
        }
        let mut state = self.state.lock();
        for token in tokens {
            state.abandon(&self.backend, token);
        }
    }
}
