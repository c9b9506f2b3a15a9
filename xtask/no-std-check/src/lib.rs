//! Links gpu-core into a `#![no_std]` library and exercises each of its pure parts, so that
//! their code is compiled without std; the size probe links the same parts one by one.
#![no_std]

extern crate alloc;

pub mod parts;

use core::alloc::{GlobalAlloc, Layout};
use core::sync::atomic::{AtomicUsize, Ordering};

/// A bump allocator over a static arena: enough to link, never meant to run for long.
struct Arena;

const ARENA_BYTES: usize = 1 << 20;
static mut ARENA: [u8; ARENA_BYTES] = [0; ARENA_BYTES];
static NEXT: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Arena {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let base = core::ptr::addr_of_mut!(ARENA) as usize;
        let mut offset = NEXT.load(Ordering::Relaxed);
        loop {
            let start = (base + offset).next_multiple_of(layout.align()) - base;
            let end = start + layout.size();
            if end > ARENA_BYTES {
                return core::ptr::null_mut();
            }
            match NEXT.compare_exchange(offset, end, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return (base + start) as *mut u8,
                Err(seen) => offset = seen,
            }
        }
    }

    unsafe fn dealloc(&self, _ptr: *mut u8, _layout: Layout) {}
}

#[global_allocator]
static ALLOCATOR: Arena = Arena;

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}

/// Uses every pure part, so that all of them are compiled and linked without std.
#[unsafe(no_mangle)]
pub extern "C" fn no_std_check_entry(ptr: usize, len: usize) -> usize {
    parts::lock_table(ptr, len)
        + parts::token(1 + len % 2, 1 + ptr % 4)
        + parts::allocator(len)
        + parts::workgroup(len as u32)
}
