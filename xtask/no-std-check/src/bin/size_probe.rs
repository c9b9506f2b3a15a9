//! A bare-metal program that links the gpu-core parts its features name and nothing else, so
//! that `cargo xtask code-size` can read what each part costs from the ELF's section sizes.
#![no_std]
#![no_main]

use core::hint::black_box;

// The global allocator and the panic handler, whichever parts are linked.
use no_std_check as _;

/// The entry point the linker starts from; everything it does not reach is dropped.
#[unsafe(no_mangle)]
pub extern "C" fn _start() -> ! {
    let (ptr, len) = (black_box(0x2000_0000usize), black_box(4096usize));
    #[cfg(feature = "lock-table")]
    black_box(no_std_check::parts::lock_table(ptr, len));
    #[cfg(feature = "token")]
    black_box(no_std_check::parts::token(black_box(2), black_box(3)));
    #[cfg(feature = "allocator")]
    black_box(no_std_check::parts::allocator(len));
    #[cfg(feature = "workgroup")]
    black_box(no_std_check::parts::workgroup(len as u32));
    black_box((ptr, len));
    loop {
        core::hint::spin_loop();
    }
}
