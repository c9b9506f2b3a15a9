//! The standard kernel library as host kernels: `fill_u32`, `axpy_f32` and
//! `workgroup_reverse_u32`, with the names and arguments of the library's table
//! ([`gpu_core::backend::library::LIBRARY`]), which the GPU kernels share.

use alloc::sync::Arc;

use super::HostErrorCode;
use super::kernels::{KernelContext, KernelFn};
use gpu_core::error::Result;

/// The standard kernels, by name, as the host backend registers them by default.
///
/// # Examples
///
/// ```
/// use gpu_core::backend::library::LIBRARY;
/// use gpu_rt::host::standard_kernels;
///
/// let names = standard_kernels().map(|(name, _)| name);
/// assert_eq!(names, ["fill_u32", "axpy_f32", "workgroup_reverse_u32"]);
/// // One host kernel for each entry of the library's table, which the GPU kernels share.
/// assert!(LIBRARY.iter().zip(names).all(|(entry, name)| entry.name == name));
/// ```
pub fn standard_kernels() -> [(&'static str, KernelFn); 3] {
    [
        ("fill_u32", Arc::new(fill_u32)),
        ("axpy_f32", Arc::new(axpy_f32)),
        ("workgroup_reverse_u32", Arc::new(workgroup_reverse_u32)),
    ]
}

/// A 64-bit count as an index bound.
fn to_index(count: u64) -> Result<usize> {
    usize::try_from(count).map_err(|_| HostErrorCode::InvalidValue.error("launch"))
}

/// The indices below `count` that this workgroup's threads visit in a grid-stride loop
/// (thread `t` of group `g` starts at `g * threads_per_group + t`, stepping by all threads).
fn grid_stride(context: &KernelContext<'_>, count: usize) -> impl Iterator<Item = usize> {
    let dims = context.dims();
    let per_group = dims.block.iter().map(|&n| n as usize).product::<usize>();
    let all_threads = per_group.saturating_mul(dims.grid.iter().map(|&n| n as usize).product());
    let first = usize::try_from(context.group_index())
        .unwrap_or(usize::MAX)
        .saturating_mul(per_group);
    (first..count)
        .step_by(all_threads.max(1))
        .flat_map(move |start| start..start.saturating_add(per_group).min(count))
}

/// `fill_u32(dst, value, count)`: `dst[i] = value` for `i < count`.
fn fill_u32(context: &KernelContext<'_>, _workgroup: &mut [u8]) -> Result<()> {
    let dst = context.arg_ptr(0)?;
    let value = context.arg_u32(1)?;
    let count = to_index(context.arg_u64(2)?)?;
    let dst = context.view::<u32>(dst, count)?;
    grid_stride(context, count).try_for_each(|i| dst.set(i, value))
}

/// `axpy_f32(a, x, y, count)`: `y[i] = a * x[i] + y[i]` for `i < count`.
fn axpy_f32(context: &KernelContext<'_>, _workgroup: &mut [u8]) -> Result<()> {
    let a = context.arg_f32(0)?;
    let count = to_index(context.arg_u64(3)?)?;
    let x = context.view::<f32>(context.arg_ptr(1)?, count)?;
    let y = context.view::<f32>(context.arg_ptr(2)?, count)?;
    grid_stride(context, count).try_for_each(|i| y.set(i, a * x.get(i)? + y.get(i)?))
}

/// `workgroup_reverse_u32(data, words_per_group)`: group `g` loads its `W` words into dynamic
/// workgroup memory and writes back `data[g*W + i] = shared[W-1-i] + 1`. It writes every byte
/// of the dynamic buffer, as the GPU kernel does, so the launch must have been given it all.
fn workgroup_reverse_u32(context: &KernelContext<'_>, workgroup: &mut [u8]) -> Result<()> {
    let data = context.arg_ptr(0)?;
    let words = context.arg_u32(1)? as usize;
    let bytes = words * 4;
    if bytes > workgroup.len() {
        return Err(HostErrorCode::IllegalAddress.error("launch"));
    }
    let group = usize::try_from(context.group_index())
        .map_err(|_| HostErrorCode::IllegalAddress.error("launch"))?;
    let start = group
        .checked_mul(bytes)
        .and_then(|offset| data.checked_add(offset))
        .ok_or_else(|| HostErrorCode::IllegalAddress.error("launch"))?;
    let (shared, rest) = workgroup.split_at_mut(bytes);
    rest.fill(0xA5);
    context.view::<u8>(start, bytes)?.read_into(shared)?;
    let out = context.view::<u32>(start, words)?;
    for i in 0..words {
        let from = 4 * (words - 1 - i);
        let word = u32::from_ne_bytes([
            shared[from],
            shared[from + 1],
            shared[from + 2],
            shared[from + 3],
        ]);
        out.set(i, word.wrapping_add(1))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use gpu_core::backend::library::LIBRARY;

    #[test]
    fn every_kernel_of_the_librarys_table_has_a_host_kernel() {
        let names = super::standard_kernels().map(|(name, _)| name);
        let table: alloc::vec::Vec<&str> = LIBRARY.iter().map(|entry| entry.name).collect();
        assert_eq!(names.as_slice(), table.as_slice());
    }
}
