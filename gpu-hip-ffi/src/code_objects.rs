//! The standard kernels as AMDGPU code objects, one per target, compiled from
//! kernels/kernels_amdgpu.hip by `cargo xtask amdgpu-kernels` and embedded, and their kernarg
//! layout; both AMD backends (HIP's module loader, HSA's code object reader) try each object
//! and keep the first the device accepts.

use gpu_core::backend::library::ParamKind;

/// The code objects, in the order they are tried: gfx90a (CDNA2), gfx942 (CDNA3), gfx1100
/// (RDNA3).
pub const CODE_OBJECTS: &[&[u8]] = &[
    include_bytes!("../kernels/code_objects/gfx90a.hsaco"),
    include_bytes!("../kernels/code_objects/gfx942.hsaco"),
    include_bytes!("../kernels/code_objects/gfx1100.hsaco"),
];

/// Where a kernel's explicit arguments sit in its kernarg segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernargLayout {
    /// Byte offset of each parameter, in order.
    pub offsets: Vec<usize>,
    /// Bytes up to the end of the last parameter (no padding after it).
    pub size: usize,
}

/// The kernarg layout of parameters `params` under AMDGPU's kernel ABI (what clang's HIP mode
/// lays out): each parameter at its natural alignment, in order. The code objects' kernel
/// descriptors are tested to agree for every library kernel.
pub fn kernarg_layout(params: &[ParamKind]) -> KernargLayout {
    let mut offsets = Vec::with_capacity(params.len());
    let size = params.iter().fold(0, |offset: usize, param| {
        let size = match param {
            ParamKind::Ptr | ParamKind::U64 => 8,
            ParamKind::U32 | ParamKind::F32 => 4,
        };
        let at = offset.next_multiple_of(size);
        offsets.push(at);
        at + size
    });
    KernargLayout { offsets, size }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_core::backend::library::LIBRARY;

    fn u16_at(bytes: &[u8], at: usize) -> u16 {
        u16::from_le_bytes(bytes[at..at + 2].try_into().unwrap())
    }
    fn u32_at(bytes: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
    }
    fn u64_at(bytes: &[u8], at: usize) -> usize {
        u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize
    }

    /// One section header's type, address, file offset, size, link and entry size.
    struct Section {
        kind: u32,
        address: usize,
        offset: usize,
        size: usize,
        link: usize,
        entry_size: usize,
    }

    fn sections(elf: &[u8]) -> Vec<Section> {
        let table = u64_at(elf, 0x28);
        let entry = usize::from(u16_at(elf, 0x3a));
        let count = usize::from(u16_at(elf, 0x3c));
        (0..count)
            .map(|i| {
                let at = table + i * entry;
                Section {
                    kind: u32_at(elf, at + 4),
                    address: u64_at(elf, at + 0x10),
                    offset: u64_at(elf, at + 0x18),
                    size: u64_at(elf, at + 0x20),
                    link: u32_at(elf, at + 0x28) as usize,
                    entry_size: u64_at(elf, at + 0x38),
                }
            })
            .collect()
    }

    /// The file bytes of symbol `name` in the symbol table (SHT_SYMTAB), found through the
    /// section that holds its address.
    fn symbol_bytes<'a>(elf: &'a [u8], name: &str) -> Option<&'a [u8]> {
        let sections = sections(elf);
        let symtab = sections.iter().find(|s| s.kind == 2)?;
        let strtab = &sections[symtab.link];
        (0..symtab.size / symtab.entry_size).find_map(|i| {
            let at = symtab.offset + i * symtab.entry_size;
            let name_at = strtab.offset + u32_at(elf, at) as usize;
            let end = name_at + elf[name_at..].iter().position(|&b| b == 0)?;
            if &elf[name_at..end] != name.as_bytes() {
                return None;
            }
            let (value, size) = (u64_at(elf, at + 8), u64_at(elf, at + 16));
            let holder = sections.iter().find(|s| {
                s.kind != 8 && s.address <= value && value + size <= s.address + s.size
            })?;
            let start = holder.offset + (value - holder.address);
            Some(&elf[start..start + size])
        })
    }

    #[test]
    fn each_code_object_is_an_amdgpu_elf_for_its_target_with_every_kernel() {
        // EF_AMDGPU_MACH_* of each target (LLVM's ELF.h), in CODE_OBJECTS order.
        let machines = [("gfx90a", 0x3f), ("gfx942", 0x4c), ("gfx1100", 0x41)];
        assert_eq!(CODE_OBJECTS.len(), machines.len());
        for (elf, (target, machine)) in CODE_OBJECTS.iter().zip(machines) {
            assert_eq!(&elf[..4], b"\x7fELF", "{target}: ELF magic");
            assert_eq!(elf[4], 2, "{target}: 64-bit");
            assert_eq!(elf[5], 1, "{target}: little-endian");
            assert_eq!(elf[7], 64, "{target}: ELFOSABI_AMDGPU_HSA");
            assert_eq!(u16_at(elf, 0x10), 3, "{target}: a shared object");
            assert_eq!(u16_at(elf, 0x12), 224, "{target}: EM_AMDGPU");
            assert_eq!(
                u32_at(elf, 0x30) & 0xff,
                machine,
                "{target}: e_flags' machine"
            );
            for entry in LIBRARY {
                assert!(
                    symbol_bytes(elf, entry.name).is_some(),
                    "{target}: kernel {} is missing",
                    entry.name
                );
                let descriptor = symbol_bytes(elf, &format!("{}.kd", entry.name))
                    .unwrap_or_else(|| panic!("{target}: {}.kd is missing", entry.name));
                assert_eq!(
                    descriptor.len(),
                    64,
                    "{target}: a kernel descriptor is 64 bytes"
                );
                // amdhsa kernel descriptor: kernarg_size is the u32 at byte 8.
                assert_eq!(
                    u32_at(descriptor, 8),
                    kernarg_layout(entry.params).size as u32,
                    "{target}: kernarg size of {}",
                    entry.name
                );
                // No static LDS: workgroup memory is the launch's dynamic amount only.
                assert_eq!(
                    u32_at(descriptor, 0),
                    0,
                    "{target}: {} static LDS",
                    entry.name
                );
            }
        }
    }

    #[test]
    fn kernargs_follow_natural_alignment() {
        let layout = |params: &[ParamKind]| kernarg_layout(params);
        assert_eq!(
            layout(&[ParamKind::Ptr, ParamKind::U32, ParamKind::U64]),
            KernargLayout {
                offsets: vec![0, 8, 16],
                size: 24
            }
        );
        assert_eq!(
            layout(&[
                ParamKind::F32,
                ParamKind::Ptr,
                ParamKind::Ptr,
                ParamKind::U64
            ]),
            KernargLayout {
                offsets: vec![0, 8, 16, 24],
                size: 32
            }
        );
        assert_eq!(
            layout(&[ParamKind::Ptr, ParamKind::U32]),
            KernargLayout {
                offsets: vec![0, 8],
                size: 12
            }
        );
        assert_eq!(
            layout(&[
                ParamKind::U32,
                ParamKind::U32,
                ParamKind::F32,
                ParamKind::U64
            ]),
            KernargLayout {
                offsets: vec![0, 4, 8, 16],
                size: 24
            }
        );
        assert_eq!(layout(&[]).size, 0);
    }
}
