//! The injected side's pure helpers: a launch's parameter words read within their sizes (from
//! `kernelParams` and from an `extra` buffer), parameter sizes, fills' elements.

use super::*;

#[test]
fn a_launchs_words_are_read_within_each_parameters_size() {
    let pointer: u64 = 0x7f00_0000_1000;
    let count: u32 = 7;
    // A struct of three words (a pointer among them), unaligned in its buffer.
    let mut packed = [0u8; 25];
    packed[1..9].copy_from_slice(&0x7f00_0000_2000u64.to_ne_bytes());
    packed[17..25].copy_from_slice(&0x7f00_0000_3000u64.to_ne_bytes());
    let mut params: [*mut c_void; 4] = [
        (&raw const pointer).cast_mut().cast(),
        (&raw const count).cast_mut().cast(),
        packed[1..].as_mut_ptr().cast(),
        core::ptr::null_mut(),
    ];
    // SAFETY: each pointer has as many bytes as its size says; the last is null.
    let words = unsafe { param_words(params.as_mut_ptr(), &[8, 4, 24, 8]) };
    assert_eq!(words, [pointer, 0x7f00_0000_2000, 0x7f00_0000_3000]);
    // SAFETY: a null array is not read.
    assert!(unsafe { param_words(core::ptr::null_mut(), &[8]) }.is_empty());
    // Fewer sizes than pointers: only those are read.
    // SAFETY: as above.
    assert_eq!(unsafe { param_words(params.as_mut_ptr(), &[8]) }, [pointer]);
}

#[test]
fn a_large_struct_parameter_is_read_up_to_the_cap() {
    // A reduction's parameter struct of 1 KiB with its tensor's pointer at byte 720, and
    // one of 5 KiB whose last pointer lies past the 4 KiB cap.
    let mut reduction = [0u64; 128];
    reduction[90] = 0x7f00_0000_4000;
    let mut huge = [0u64; 640];
    huge[600] = 0x7f00_0000_5000;
    huge[3] = 0x7f00_0000_6000;
    let mut params: [*mut c_void; 2] = [reduction.as_mut_ptr().cast(), huge.as_mut_ptr().cast()];
    // SAFETY: each pointer has as many bytes as its size says.
    let words = unsafe { param_words(params.as_mut_ptr(), &[1024, 5120]) };
    assert_eq!(words, [0x7f00_0000_4000, 0x7f00_0000_6000]);
}

#[test]
fn parameter_sizes_stop_at_the_first_failure_and_a_fill_knows_its_element() {
    let sizes = param_sizes(|index, _, size| {
        *size = [8, 4, 24][index.min(2)];
        if index < 3 { 0 } else { 1 }
    });
    assert_eq!(sizes, [8, 4, 24]);
    assert!(param_sizes(|_, _, _| 1).is_empty());
    assert_eq!(element_size("cuMemsetD8Async_ptsz"), 1);
    assert_eq!(element_size("cuMemsetD16_v2"), 2);
    assert_eq!(element_size("cuMemsetD32Async"), 4);
}

#[test]
fn an_extra_parameter_buffer_is_read_within_its_size() {
    let mut buffer = [7u64, 0x7f00_0000_1000, 0, 0x7f00_0000_2000];
    let mut size: usize = 24;
    let mut extra: [*mut c_void; 5] = [
        EXTRA_BUFFER_POINTER as *mut c_void,
        buffer.as_mut_ptr().cast(),
        EXTRA_BUFFER_SIZE as *mut c_void,
        (&raw mut size).cast(),
        EXTRA_END as *mut c_void,
    ];
    // SAFETY: a terminated array whose buffer has `size` bytes (of its 32).
    let words = unsafe { extra_words(extra.as_mut_ptr()) };
    assert_eq!(words, [7, 0x7f00_0000_1000]);
    let mut end: [*mut c_void; 1] = [EXTRA_END as *mut c_void];
    // SAFETY: an array that ends at once, and no array.
    assert!(unsafe { extra_words(end.as_mut_ptr()) }.is_empty());
    // SAFETY: as above.
    assert!(unsafe { extra_words(core::ptr::null_mut()) }.is_empty());
}
