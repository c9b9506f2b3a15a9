//! Links gpu-core into a `#![no_std]` staticlib and touches its entry points, so that the
//! linker keeps them. Never run; only built.
#![no_std]

extern crate alloc;

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

/// Uses the pure modules, so that their code is compiled and linked without std.
#[unsafe(no_mangle)]
pub extern "C" fn no_std_check_entry(ptr: usize, len: usize) -> usize {
    let Ok(table) = gpu_core::lock_table::LockTable::new(1) else {
        return 0;
    };
    let pinned = table.lookup(ptr, len, gpu_core::DeviceId(0));
    let planner = gpu_core::token::Planner::new(1);
    usize::from(matches!(pinned, Ok(Some(_)))) + planner.steps().len()
}
