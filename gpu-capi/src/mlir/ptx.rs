//! The parameter sizes of a PTX module's kernels, read from its `.entry` declarations, so the
//! graph mode (`mlir::graphs`) can copy a launch's parameter values at the call.
//!
//! MLIR's lowering (`cubin-format=isa`) hands `mgpuModuleLoad` PTX text; a cubin or fatbin
//! (binary) names no sizes here, and its kernels' launches end a graph mode's sequence.

use std::ffi::{CStr, CString, c_void};

use hashbrown::HashMap;

/// The longest module image read as PTX text (bytes before its NUL).
const MAX_PTX: usize = 64 << 20;

/// The parameter sizes of each kernel of `image`, when it is PTX text (starts with a comment,
/// a directive or white space and ends with a NUL within [`MAX_PTX`] bytes); `None` otherwise.
///
/// # Safety
/// `image` points to a module image the driver reads (PTX text is NUL-terminated).
pub(super) unsafe fn entry_params(image: *const c_void) -> Option<HashMap<CString, Vec<usize>>> {
    let start = image.cast::<u8>();
    // SAFETY: the caller's promise: a module image has at least one byte.
    let first = unsafe { *start };
    if !matches!(first, b'/' | b'.' | b' ' | b'\t' | b'\n' | b'\r') {
        return None; // ELF (cubin) or a fatbin: binary
    }
    let mut len = 0;
    // SAFETY: PTX text is NUL-terminated (the driver's own requirement); reading stops at the
    // NUL or at `MAX_PTX` bytes.
    while len < MAX_PTX && unsafe { *start.add(len) } != 0 {
        len += 1;
    }
    if len == MAX_PTX {
        return None;
    }
    // SAFETY: `len` bytes then a NUL, read above.
    let text = unsafe { CStr::from_ptr(image.cast()) }.to_str().ok()?;
    Some(parse(text))
}

/// The parameter sizes of each `.entry` of PTX `text` (an entry with a parameter of unknown
/// type is left out).
pub(super) fn parse(text: &str) -> HashMap<CString, Vec<usize>> {
    let mut entries = HashMap::new();
    let mut rest = text;
    while let Some(at) = rest.find(".entry") {
        rest = &rest[at + ".entry".len()..];
        let Some(open) = rest.find('(') else { break };
        let name = rest[..open].trim();
        let Some(close) = rest[open..].find(')') else {
            break;
        };
        let params = &rest[open + 1..open + close];
        rest = &rest[open + close..];
        let sizes: Option<Vec<usize>> = params
            .split(',')
            .map(str::trim)
            .filter(|param| !param.is_empty())
            .map(param_size)
            .collect();
        if let (Some(sizes), Ok(name)) = (sizes, CString::new(name)) {
            entries.insert(name, sizes);
        }
    }
    entries
}

/// The size of one `.param` declaration: its type's width, times its array length if any.
fn param_size(param: &str) -> Option<usize> {
    let width = param.split_whitespace().find_map(|token| {
        Some(match token {
            ".u8" | ".s8" | ".b8" => 1,
            ".u16" | ".s16" | ".b16" | ".f16" => 2,
            ".u32" | ".s32" | ".b32" | ".f32" => 4,
            ".u64" | ".s64" | ".b64" | ".f64" => 8,
            _ => return None,
        })
    })?;
    let count = match (param.rfind('['), param.rfind(']')) {
        (Some(open), Some(close)) if open < close => param[open + 1..close].trim().parse().ok()?,
        _ => 1,
    };
    Some(width * count)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = "//\n.version 8.0\n.target sm_90\n.address_size 64\n\n\
        .visible .entry twice(\n\t.param .u64 twice_param_0,\n\t.param .u32 twice_param_1,\n\
        \t.param .u64 .ptr .global .align 1 twice_param_2\n)\n{\n\tret;\n}\n\
        .visible .entry byval(\n\t.param .align 8 .b8 byval_param_0[24],\n\t.param .f32 x\n)\n\
        {\n\tret;\n}\n.visible .entry none()\n{\n\tret;\n}\n\
        .visible .entry odd(\n\t.param .pred p\n)\n{\n\tret;\n}\n";

    #[test]
    fn entries_give_their_parameter_sizes() {
        let entries = parse(PTX);
        assert_eq!(entries[c"twice"], vec![8, 4, 8]);
        assert_eq!(entries[c"byval"], vec![24, 4]);
        assert_eq!(entries[c"none"], Vec::<usize>::new());
        assert!(
            !entries.contains_key(c"odd"),
            "an unknown type names no sizes"
        );
    }

    #[test]
    fn text_is_read_and_binaries_are_not() {
        let text = CString::new(PTX).unwrap();
        // SAFETY: a NUL-terminated string.
        let read = unsafe { entry_params(text.as_ptr().cast()) }.unwrap();
        assert_eq!(read[c"twice"], vec![8, 4, 8]);
        let elf = b"\x7fELF\x02\x01\x01\0";
        // SAFETY: eight readable bytes; the first is not text.
        assert!(unsafe { entry_params(elf.as_ptr().cast()) }.is_none());
    }
}
