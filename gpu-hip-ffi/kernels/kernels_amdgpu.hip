// The standard kernel library for AMD GPUs: the same kernels, names and arguments as the CUDA
// crate's kernels.cu, written for clang's HIP mode without ROCm's headers or device libraries
// (-nogpuinc -nogpulib): work-item and workgroup ids come from the amdgcn builtins, sizes from
// the dispatch packet. `cargo xtask amdgpu-kernels` compiles it into one code object per
// target (code_objects/*.hsaco, committed), which hipModuleLoadData loads on AMD GPUs.

#define KERNEL extern "C" __attribute__((global))
#define DEVICE static __attribute__((device)) inline

typedef unsigned int u32;
typedef unsigned long long u64;

// The dispatch packet's workgroup_size_x (a u16 at byte 4) and grid_size_x (a u32 at byte 12,
// in work-items): HSA's hsa_kernel_dispatch_packet_t.
DEVICE u32 workgroup_size_x() {
    return ((const unsigned short *)__builtin_amdgcn_dispatch_ptr())[2];
}
DEVICE u32 grid_size_x() { return ((const u32 *)__builtin_amdgcn_dispatch_ptr())[3]; }
DEVICE u64 global_id_x() {
    return (u64)__builtin_amdgcn_workgroup_id_x() * workgroup_size_x() +
           __builtin_amdgcn_workitem_id_x();
}

// dst[i] = value for every i < count; any grid size works (grid-stride loop).
KERNEL void fill_u32(u32 *dst, u32 value, u64 count) {
    for (u64 i = global_id_x(); i < count; i += grid_size_x()) {
        dst[i] = value;
    }
}

// y[i] = a * x[i] + y[i] for every i < count; any grid size works (grid-stride loop).
KERNEL void axpy_f32(float a, const float *x, float *y, u64 count) {
    for (u64 i = global_id_x(); i < count; i += grid_size_x()) {
        y[i] = a * x[i] + y[i];
    }
}

// The launch's dynamic workgroup memory (LDS).
extern __attribute__((shared)) u32 shared_words[];

// Workgroup g reverses data[g*W .. (g+1)*W] through its dynamic workgroup memory, adding one:
// data[g*W + i] = old data[g*W + W-1-i] + 1. The launch must give at least 4*W dynamic bytes.
KERNEL void workgroup_reverse_u32(u32 *data, u32 words_per_group) {
    u32 *group = data + (u64)__builtin_amdgcn_workgroup_id_x() * words_per_group;
    for (u32 i = __builtin_amdgcn_workitem_id_x(); i < words_per_group; i += workgroup_size_x()) {
        shared_words[i] = group[i];
    }
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
    for (u32 i = __builtin_amdgcn_workitem_id_x(); i < words_per_group; i += workgroup_size_x()) {
        group[i] = shared_words[words_per_group - 1 - i] + 1u;
    }
}
