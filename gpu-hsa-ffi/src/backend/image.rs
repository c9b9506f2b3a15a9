//! The size of a code object given only its address: HSA's code object reader needs a size,
//! the backend trait passes a pointer, and an ELF's header says where its tables end.

use gpu_core::{Error, Result};

use crate::result::BACKEND;

/// Bytes of a 64-bit ELF header (`Elf64_Ehdr`).
pub(crate) const ELF_HEADER_BYTES: usize = 64;

/// The error for an image that is not a 64-bit little-endian ELF.
fn not_elf(why: &'static str) -> Error {
    Error::Unsupported {
        backend: BACKEND,
        what: why,
    }
}

/// The size of the ELF image whose first [`ELF_HEADER_BYTES`] bytes are `header`: the end of
/// its section-header table or program-header table, whichever lies further (linkers put the
/// section headers last, after every section).
///
/// # Errors
/// [`Error::Unsupported`] for anything but a 64-bit little-endian ELF, or a header whose tables
/// end beyond the address space.
pub(crate) fn elf_image_size(header: &[u8; ELF_HEADER_BYTES]) -> Result<usize> {
    if header[..4] != *b"\x7fELF" {
        return Err(not_elf(
            "loading a module image that is not an ELF code object",
        ));
    }
    if header[4] != 2 || header[5] != 1 {
        return Err(not_elf(
            "loading a module image that is not a 64-bit little-endian ELF",
        ));
    }
    let u16_at = |at: usize| u64::from(u16::from_le_bytes([header[at], header[at + 1]]));
    let u64_at = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().unwrap_or([0; 8]));
    let table_end = |offset: u64, entry: u64, count: u64| {
        entry
            .checked_mul(count)
            .and_then(|bytes| offset.checked_add(bytes))
    };
    let programs = table_end(u64_at(0x20), u16_at(0x36), u16_at(0x38));
    let sections = table_end(u64_at(0x28), u16_at(0x3a), u16_at(0x3c));
    let end = programs
        .zip(sections)
        .map(|(p, s)| p.max(s).max(ELF_HEADER_BYTES as u64))
        .and_then(|end| usize::try_from(end).ok())
        .ok_or(not_elf(
            "loading an ELF image whose tables end beyond the address space",
        ))?;
    Ok(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_code_object_is_measured_to_its_exact_length() {
        for image in gpu_hip_ffi::code_objects::CODE_OBJECTS {
            let header: &[u8; ELF_HEADER_BYTES] = image[..ELF_HEADER_BYTES].try_into().unwrap();
            assert_eq!(elf_image_size(header), Ok(image.len()));
        }
    }

    #[test]
    fn other_images_are_refused() {
        let mut header = [0u8; ELF_HEADER_BYTES];
        header[..16].copy_from_slice(b"// PTX text.....");
        assert!(matches!(
            elf_image_size(&header),
            Err(Error::Unsupported { .. })
        ));
        let mut elf32 = [0u8; ELF_HEADER_BYTES];
        elf32[..6].copy_from_slice(b"\x7fELF\x01\x01");
        assert!(matches!(
            elf_image_size(&elf32),
            Err(Error::Unsupported { .. })
        ));
        let mut huge = [0u8; ELF_HEADER_BYTES];
        huge[..6].copy_from_slice(b"\x7fELF\x02\x01");
        huge[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
        huge[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        huge[0x3c..0x3e].copy_from_slice(&2u16.to_le_bytes());
        assert!(matches!(
            elf_image_size(&huge),
            Err(Error::Unsupported { .. })
        ));
    }

    #[test]
    fn a_header_without_tables_is_the_header_alone() {
        let mut header = [0u8; ELF_HEADER_BYTES];
        header[..6].copy_from_slice(b"\x7fELF\x02\x01");
        assert_eq!(elf_image_size(&header), Ok(ELF_HEADER_BYTES));
    }
}
