// The standard kernel library of the GPU runtime toolkit, for the CUDA backend.
//
// The host backend registers Rust functions under the same names with the same arguments, so a
// program launches them on either backend. Launches are one-dimensional. The PTX beside this
// file (kernels.ptx) is what the backend embeds; the crate's README says how it was produced.

// dst[i] = value for every i < count; any grid size works (grid-stride loop).
extern "C" __global__ void fill_u32(unsigned int *dst, unsigned int value,
                                    unsigned long long count) {
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < count; i += stride) {
        dst[i] = value;
    }
}

// y[i] = a * x[i] + y[i] for every i < count; any grid size works (grid-stride loop).
extern "C" __global__ void axpy_f32(float a, const float *x, float *y,
                                    unsigned long long count) {
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < count; i += stride) {
        y[i] = a * x[i] + y[i];
    }
}

// Workgroup g reverses data[g*W .. (g+1)*W] through its dynamic workgroup memory, adding one:
// data[g*W + i] = old data[g*W + W-1-i] + 1. The launch must give at least 4*W dynamic bytes;
// every one of the W words is written and read, so a launch planned above the default 48 KiB
// fails (or faults under memcheck) unless the opt-in took effect.
extern "C" __global__ void workgroup_reverse_u32(unsigned int *data,
                                                 unsigned int words_per_group) {
    extern __shared__ unsigned int shared_words[];
    unsigned int *group = data + (unsigned long long)blockIdx.x * words_per_group;
    for (unsigned int i = threadIdx.x; i < words_per_group; i += blockDim.x) {
        shared_words[i] = group[i];
    }
    __syncthreads();
    for (unsigned int i = threadIdx.x; i < words_per_group; i += blockDim.x) {
        group[i] = shared_words[words_per_group - 1 - i] + 1u;
    }
}
