// The floor under forkjoin.mlir: the same work (copy in, two kernels, a kernel on their
// results, copy out, for `in`'s pageable static buffer) written by hand against the CUDA
// runtime, with nothing a runtime library decides left to decide. Built and run on the GPU box
// (`nvcc -O2 -o forkjoin_raw forkjoin_raw.cu`); each variant prints the time per iteration
// over the same element counts as the MLIR program, so the MLIR table can say how much of an
// iteration is the work itself and how much is the runtime under the program.
//
// Variants (each checks every result):
//   whole:        buffers allocated once; one stream: copy in, 3 kernels, copy out, sync.
//   pool:         as whole, plus cudaMallocAsync x3 / cudaFreeAsync x3 per iteration (warm pool).
//   fork:         as whole, with the two middle kernels on a second stream (event fork and join).
//   pinned:       as whole, with the host buffers registered once (page-locked copies).
//   copies:       copy in, copy out, sync only.
//   kernels:      the 3 kernels and a sync only.
//   sync:         a stream synchronize of an idle stream only.
// Usage: forkjoin_raw [iterations=1000] [elements=4096]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CHECK(call)                                                                      \
    do {                                                                                 \
        cudaError_t status_ = (call);                                                    \
        if (status_ != cudaSuccess) {                                                    \
            std::fprintf(stderr, "forkjoin_raw: FAILED: %s: %s\n", #call,                \
                         cudaGetErrorString(status_));                                   \
            std::exit(1);                                                                \
        }                                                                                \
    } while (0)

extern "C" __global__ void twice(const float *src, float *dst, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i] + src[i];
}
extern "C" __global__ void plus_one(const float *src, float *dst, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i] + 1.0f;
}
extern "C" __global__ void multiply(const float *a, const float *b, float *dst, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) dst[i] = a[i] * b[i];
}

enum { MAX = 1 << 20 };
static float in[MAX], out[MAX];

struct Buffers {
    float *x, *y, *z;
};

static double now_us() {
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

static void kernels(cudaStream_t s, cudaStream_t side, cudaEvent_t forked, cudaEvent_t joined,
                    Buffers b, long n) {
    unsigned blocks = (unsigned)((n + 255) / 256);
    if (side) {
        CHECK(cudaEventRecord(forked, s));
        CHECK(cudaStreamWaitEvent(side, forked, 0));
    }
    twice<<<blocks, 256, 0, s>>>(b.x, b.y, n);
    plus_one<<<blocks, 256, 0, side ? side : s>>>(b.x, b.z, n);
    if (side) {
        CHECK(cudaEventRecord(joined, side));
        CHECK(cudaStreamWaitEvent(s, joined, 0));
    }
    multiply<<<blocks, 256, 0, s>>>(b.y, b.z, b.x, n);
    CHECK(cudaGetLastError());
}

int main(int argc, char **argv) {
    long iterations = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 1000;
    long n = argc > 2 ? std::strtol(argv[2], nullptr, 10) : 4096;
    if (iterations <= 0) iterations = 1000;
    if (n <= 0 || n > MAX) n = 4096;
    size_t bytes = n * sizeof(float);
    for (long i = 0; i < n; i++) in[i] = (float)(i % 1000);
    cudaStream_t s, side;
    cudaEvent_t forked, joined;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&forked, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&joined, cudaEventDisableTiming));
    Buffers fixed;
    CHECK(cudaMalloc(&fixed.x, bytes));
    CHECK(cudaMalloc(&fixed.y, bytes));
    CHECK(cudaMalloc(&fixed.z, bytes));

    const char *variants[] = {"whole", "pool", "fork", "pinned", "copies", "kernels", "sync"};
    std::printf("forkjoin_raw: %ld elements, %ld iterations per variant\n", n, iterations);
    for (const char *variant : variants) {
        bool pinned = !std::strcmp(variant, "pinned");
        bool copies = std::strcmp(variant, "kernels") && std::strcmp(variant, "sync");
        bool compute = std::strcmp(variant, "copies") && std::strcmp(variant, "sync");
        bool pool = !std::strcmp(variant, "pool");
        cudaStream_t fork_side = std::strcmp(variant, "fork") ? nullptr : side;
        if (pinned) {
            CHECK(cudaHostRegister(in, bytes, cudaHostRegisterDefault));
            CHECK(cudaHostRegister(out, bytes, cudaHostRegisterDefault));
        }
        double total = 0;
        for (long it = 0; it <= iterations; it++) {  // iteration 0 warms up, untimed
            std::memset(out, 0xff, bytes);
            double start = now_us();
            Buffers b = fixed;
            if (pool) {
                CHECK(cudaMallocAsync(&b.x, bytes, s));
                CHECK(cudaMallocAsync(&b.y, bytes, s));
                CHECK(cudaMallocAsync(&b.z, bytes, s));
            }
            if (copies) CHECK(cudaMemcpyAsync(b.x, in, bytes, cudaMemcpyHostToDevice, s));
            if (compute) kernels(s, fork_side, forked, joined, b, n);
            if (copies) CHECK(cudaMemcpyAsync(out, b.x, bytes, cudaMemcpyDeviceToHost, s));
            if (pool) {
                CHECK(cudaFreeAsync(b.x, s));
                CHECK(cudaFreeAsync(b.y, s));
                CHECK(cudaFreeAsync(b.z, s));
            }
            CHECK(cudaStreamSynchronize(s));
            if (it > 0) total += now_us() - start;
            if (copies && compute)
                for (long i = 0; i < n; i++)
                    if (out[i] != (2 * in[i]) * (in[i] + 1)) {
                        std::fprintf(stderr, "forkjoin_raw: FAILED: %s: element %ld is %g\n",
                                     variant, i, out[i]);
                        return 1;
                    }
        }
        if (pinned) {
            CHECK(cudaHostUnregister(in));
            CHECK(cudaHostUnregister(out));
        }
        std::printf("forkjoin_raw: %s: %.2f us per iteration\n", variant, total / iterations);
    }
    CHECK(cudaFree(fixed.x));
    CHECK(cudaFree(fixed.y));
    CHECK(cudaFree(fixed.z));
    CHECK(cudaEventDestroy(forked));
    CHECK(cudaEventDestroy(joined));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaStreamDestroy(side));
    return 0;
}
