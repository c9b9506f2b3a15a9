//! How the host backend's work touches device memory: relaxed atomic byte operations, so work
//! that a program left unordered (two streams writing the same bytes, which a GPU allows with
//! an unspecified result) is never a data race in Rust's sense, only an unspecified value. A
//! copy's source that nothing writes meanwhile (an upload from a shared borrow) is read as
//! plain memory: an atomic would claim the right to write it.
//!
//! Every access is one byte wide: Rust does not allow racing atomic accesses of different
//! sizes to the same memory, and two streams may touch the same bytes with any alignment.

use core::mem::{MaybeUninit, size_of};
use core::sync::atomic::{AtomicU8, Ordering};

/// The byte at `address` as an atomic.
///
/// # Safety
/// `address` is valid for reads and writes while the returned reference is used, and every
/// other access to it meanwhile is atomic too (the host backend's work, or the host after it
/// has synchronised with that work).
#[inline]
unsafe fn byte<'a>(address: usize) -> &'a AtomicU8 {
    // SAFETY: the caller's promise; a byte is always aligned.
    unsafe { AtomicU8::from_ptr(address as *mut u8) }
}

/// Copies `len` bytes from `src` to `dst`; the ranges may overlap (as `memmove`).
///
/// # Safety
/// Both ranges are valid for the copy's reads and writes, as for [`byte`].
pub(super) unsafe fn copy(dst: usize, src: usize, len: usize) {
    let move_byte = |i: usize| {
        // SAFETY: `i < len` in both loops below, so each address lies in one of the ranges the
        // caller vouched for.
        unsafe { byte(dst + i).store(byte(src + i).load(Ordering::Relaxed), Ordering::Relaxed) }
    };
    if dst > src && dst < src + len {
        // The destination starts inside the source: copy from the end.
        (0..len).rev().for_each(move_byte);
    } else {
        (0..len).for_each(move_byte);
    }
}

/// Copies `len` bytes from `src`, which nothing writes meanwhile, to `dst`, which does not
/// overlap it. The source is read as plain memory: it may be lent through a shared borrow,
/// with no right to write it that an atomic would claim.
///
/// # Safety
/// `[dst, dst + len)` is valid for writes, as for [`byte`]; `[src, src + len)` is valid for
/// reads, shares no byte with the destination, and nothing writes it during the call.
pub(super) unsafe fn copy_from_read_only(dst: usize, src: usize, len: usize) {
    for i in 0..len {
        // SAFETY: `i < len`: both addresses lie in the ranges the caller vouched for, and no
        // write races with the source's read.
        unsafe { byte(dst + i).store((src as *const u8).add(i).read(), Ordering::Relaxed) }
    }
}

/// Writes `len` bytes at `dst`, repeating `pattern` (a fill's element, whatever the
/// alignment).
///
/// # Safety
/// `[dst, dst + len)` is valid for writes, as for [`byte`].
pub(super) unsafe fn fill(dst: usize, pattern: &[u8], len: usize) {
    for (i, &value) in (0..len).zip(pattern.iter().cycle()) {
        // SAFETY: `dst + i` lies in the range the caller vouched for.
        unsafe { byte(dst + i).store(value, Ordering::Relaxed) };
    }
}

/// Reads a `T` at `address` (any alignment), byte by byte.
///
/// # Safety
/// `[address, address + size_of::<T>())` is valid for reads, as for [`byte`], and every bit
/// pattern is a valid `T`.
pub(super) unsafe fn read<T: Copy>(address: usize) -> T {
    let mut value = MaybeUninit::<T>::uninit();
    let out = value.as_mut_ptr().cast::<u8>();
    for i in 0..size_of::<T>() {
        // SAFETY: `address + i` is in the caller's range; `out + i` in the local value.
        unsafe { out.add(i).write(byte(address + i).load(Ordering::Relaxed)) };
    }
    // SAFETY: every byte was written, and every bit pattern is a valid `T`.
    unsafe { value.assume_init() }
}

/// Writes `value` at `address` (any alignment), byte by byte.
///
/// # Safety
/// `[address, address + size_of::<T>())` is valid for writes, as for [`byte`].
pub(super) unsafe fn write<T: Copy>(address: usize, value: T) {
    let bytes = (&value as *const T).cast::<u8>();
    for i in 0..size_of::<T>() {
        // SAFETY: `bytes + i` is in the local value; `address + i` in the caller's range.
        unsafe { byte(address + i).store(bytes.add(i).read(), Ordering::Relaxed) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    fn addr(bytes: &mut [u8]) -> usize {
        bytes.as_mut_ptr() as usize
    }

    #[test]
    fn copies_overlap_as_memmove_read_only_sources_copy_and_fills_repeat_their_pattern() {
        for (dst, src) in [(0, 4), (4, 0), (2, 2), (0, 8)] {
            let mut bytes: Vec<u8> = (0..16).collect();
            let mut expected = bytes.clone();
            expected.copy_within(src..src + 8, dst);
            let base = addr(&mut bytes);
            // SAFETY: both ranges lie in `bytes`, touched by nothing else.
            unsafe { copy(base + dst, base + src, 8) };
            assert_eq!(bytes, expected, "dst {dst}, src {src}");
        }
        let source: &[u8] = &[9, 8, 7];
        let mut bytes = vec![0u8; 4];
        // SAFETY: `source` is only read; the destination lies in `bytes`, apart from it.
        unsafe { copy_from_read_only(addr(&mut bytes) + 1, source.as_ptr() as usize, 3) };
        assert_eq!(bytes, [0, 9, 8, 7]);
        let mut bytes = vec![0u8; 7];
        let base = addr(&mut bytes);
        // SAFETY: as above.
        unsafe { fill(base + 1, &[1, 2, 3, 4], 6) };
        assert_eq!(bytes, [0, 1, 2, 3, 4, 1, 2]);
    }

    #[test]
    fn scalars_read_and_write_at_any_alignment() {
        let mut bytes = vec![0u8; 12];
        let base = addr(&mut bytes);
        for offset in 0..4 {
            // SAFETY: 8 bytes at `offset` lie in `bytes`; every bit pattern is a valid u64.
            unsafe {
                write(base + offset, 0x0102_0304_0506_0708_u64);
                assert_eq!(read::<u64>(base + offset), 0x0102_0304_0506_0708);
            }
        }
        // SAFETY: as above.
        let float = unsafe {
            write(base + 3, -2.5f32);
            read::<f32>(base + 3)
        };
        assert_eq!(float, -2.5);
    }
}
