//! Tests of the C API's argument checks through the exported functions (the C test program,
//! tests/c/, runs the API end to end).

use super::*;
use crate::shared::status::last_error;
use crate::shared::{self, GpurtStatus};

/// Misaligned arrays and out-parameters are refused with a status before anything is read,
/// written or shut down (a slice of one, or a write through it, is undefined behaviour: a
/// debug build aborted the process).
#[test]
fn misaligned_pointers_are_refused_before_anything_happens() {
    let _serial = shared::process_test_lock();
    shared::open_host();
    let mut words = [0u64; 8];
    let misaligned = words.as_mut_ptr().cast::<u8>().wrapping_add(1);
    let mut done = GpurtToken::default();
    // SAFETY: every call below refuses its misaligned pointer before using it.
    unsafe {
        let status = gpurt_join(misaligned.cast(), 2, &mut done);
        assert_eq!(status, GpurtStatus::InvalidArgument);
        assert!(last_error().contains("token list"), "{}", last_error());
        let status = gpurt_device_count(misaligned.cast());
        assert_eq!(status, GpurtStatus::InvalidArgument);
        assert!(last_error().contains("not aligned"), "{}", last_error());
        let status = gpurt_launch(
            GpurtKernel { id: 1 },
            misaligned.cast(),
            core::ptr::null(),
            0,
            core::ptr::null(),
            0,
            &mut done,
        );
        assert_eq!(status, GpurtStatus::InvalidArgument);
        assert!(
            last_error().contains("launch dimensions"),
            "{}",
            last_error()
        );
        let status = gpurt_shutdown(misaligned.cast());
        assert_eq!(status, GpurtStatus::InvalidArgument);
    }
    assert_eq!(done, GpurtToken::default(), "nothing written");
    assert_eq!(words, [0; 8], "nothing written");
    let report = shared::shutdown().expect("the refused shutdown left the runtime open");
    assert_eq!(report.released_objects, 0);
}
