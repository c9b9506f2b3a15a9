// The seeded cross-stream memory bugs written in plain CUDA, each with its fixed twin, for the
// recorder and compute-sanitizer side by side (run.sh). Traces of the same programs, written
// by hand, are gpu-core/tests/races/*.trace.
//
//   seeded PROGRAM bug|fixed
//   PROGRAM: c_pool_wrong_stream | mlir_missing_async_dependency | async_free_raced
//
// Kernels spin for a while so that the racing work overlaps on the GPU. Exit status 0 unless a
// CUDA call fails; whether the result is corrupted is printed, not checked (a race need not
// show).
#include <cuda_runtime.h>
#ifndef SEEDED_NO_NVTX
#include "pool_nvtx.h"
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                              \
  do {                                                                           \
    cudaError_t e_ = (call);                                                     \
    if (e_ != cudaSuccess) {                                                     \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,              \
              cudaGetErrorString(e_));                                           \
      exit(2);                                                                   \
    }                                                                            \
  } while (0)

__device__ void spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

__global__ void scale(float *x, int n, float a) {
  spin(1 << 22);
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    x[i] *= a;
}

__global__ void produce(float *x, int n) {
  spin(1 << 22);
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    x[i] = (float)i;
}

__global__ void consume(const float *x, float *out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = x[i] + 1.0f;
}

// A stream-aware sub-allocator, as C programs write them: one free list per stream, blocks
// cut from one segment; a freed block goes to the pool of the stream the caller names. It
// annotates its segment and blocks with NVTX's memory API (pool_nvtx.h: a heap, regions
// registered and unregistered), which tools attached through NVTX_INJECTION64_PATH receive
// (the recorder narrows footprints to the regions); without a tool the calls cost a check.
// Built with -DSEEDED_NO_NVTX (a toolkit without nvtx3/nvToolsExtMem.h) it annotates nothing.
enum { POOL_STREAMS = 4, POOL_BLOCKS = 16 };
typedef struct {
  char *segment;
  size_t block;
  cudaStream_t streams[POOL_STREAMS];
  int free_list[POOL_STREAMS][POOL_BLOCKS], free_count[POOL_STREAMS], next;
#ifndef SEEDED_NO_NVTX
  pool_nvtx_t nvtx;
#endif
} pool_t;

#ifdef SEEDED_NO_NVTX
static void pool_annotate(pool_t *) {}
static void pool_unannotate(pool_t *) {}
static void region_register(pool_t *, void *) {}
static void region_unregister(pool_t *, void *) {}
#else
static void pool_annotate(pool_t *p) {
  pool_nvtx_annotate(&p->nvtx, "seeded_pool", p->segment, POOL_BLOCKS * p->block);
}
static void pool_unannotate(pool_t *p) { pool_nvtx_unannotate(&p->nvtx); }
static void region_register(pool_t *p, void *ptr) { pool_nvtx_register(&p->nvtx, ptr, p->block); }
static void region_unregister(pool_t *p, void *ptr) { pool_nvtx_unregister(&p->nvtx, ptr); }
#endif

static int pool_slot(pool_t *p, cudaStream_t s) {
  for (int i = 0; i < POOL_STREAMS; i++)
    if (p->streams[i] == s || p->streams[i] == NULL) {
      p->streams[i] = s;
      return i;
    }
  abort();
}

static void *pool_alloc(pool_t *p, cudaStream_t s) {
  int slot = pool_slot(p, s);
  int b = p->free_count[slot] > 0 ? p->free_list[slot][--p->free_count[slot]] : p->next++;
  void *ptr = p->segment + (size_t)b * p->block;
  region_register(p, ptr);
  return ptr;
}

static void pool_free(pool_t *p, void *ptr, cudaStream_t s) {
  int slot = pool_slot(p, s);
  region_unregister(p, ptr);
  p->free_list[slot][p->free_count[slot]++] = (int)(((char *)ptr - p->segment) / p->block);
}

static int c_pool_wrong_stream(int fixed) {
  const int n = 1 << 14;
  pool_t pool;
  memset(&pool, 0, sizeof pool);
  pool.block = n * sizeof(float);
  CHECK(cudaMalloc((void **)&pool.segment, POOL_BLOCKS * pool.block));
  pool_annotate(&pool);
  cudaStream_t a, b;
  CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  float *x = (float *)pool_alloc(&pool, a);
  CHECK(cudaMemsetAsync(x, 0, pool.block, a));
  scale<<<32, 256, 0, a>>>(x, n, 2.0f);
  pool_free(&pool, x, fixed ? a : b);  // the bug: x was used on a, freed into b's pool
  float *y = (float *)pool_alloc(&pool, b);
  CHECK(cudaMemsetAsync(y, 0xff, pool.block, b));
  CHECK(cudaStreamSynchronize(a));
  CHECK(cudaStreamSynchronize(b));
  printf("c_pool_wrong_stream: x %s y\n", (void *)x == (void *)y ? "shares its block with" : "does not share a block with");
  CHECK(cudaStreamDestroy(a));
  CHECK(cudaStreamDestroy(b));
  pool_unannotate(&pool);
  CHECK(cudaFree(pool.segment));
  return 0;
}

// What MLIR's gpu-to-llvm lowering emits for two `gpu.launch_func async` ops (the runtime
// wrappers: a non-blocking stream per async op, an event per dependency); the bug: the second
// op's dependency list misses the first.
static int mlir_missing_async_dependency(int fixed) {
  const int n = 1 << 14;
  float *buf, *out;
  CHECK(cudaMalloc((void **)&buf, n * sizeof(float)));
  CHECK(cudaMalloc((void **)&out, n * sizeof(float)));
  cudaStream_t t1, t2;
  CHECK(cudaStreamCreateWithFlags(&t1, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&t2, cudaStreamNonBlocking));
  produce<<<32, 256, 0, t1>>>(buf, n);
  if (fixed) {
    cudaEvent_t e;
    CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CHECK(cudaEventRecord(e, t1));
    CHECK(cudaStreamWaitEvent(t2, e, 0));
    CHECK(cudaEventDestroy(e));
  }
  consume<<<32, 256, 0, t2>>>(buf, out, n);
  CHECK(cudaStreamSynchronize(t1));
  CHECK(cudaStreamSynchronize(t2));
  float last;
  CHECK(cudaMemcpy(&last, out + n - 1, sizeof last, cudaMemcpyDeviceToHost));
  printf("mlir_missing_async_dependency: out[n-1] = %g (expected %d)\n", last, n);
  CHECK(cudaStreamDestroy(t1));
  CHECK(cudaStreamDestroy(t2));
  CHECK(cudaFree(buf));
  CHECK(cudaFree(out));
  return 0;
}

static int async_free_raced(int fixed) {
  const int n = 1 << 14;
  cudaStream_t s1, s2;
  CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaEvent_t filled, read;
  CHECK(cudaEventCreateWithFlags(&filled, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&read, cudaEventDisableTiming));
  float *x, *out;
  CHECK(cudaMalloc((void **)&out, n * sizeof(float)));
  CHECK(cudaMallocAsync((void **)&x, n * sizeof(float), s1));
  CHECK(cudaMemsetAsync(x, 0, n * sizeof(float), s1));
  CHECK(cudaEventRecord(filled, s1));
  CHECK(cudaStreamWaitEvent(s2, filled, 0));
  scale<<<32, 256, 0, s2>>>(x, n, 1.0f);
  consume<<<32, 256, 0, s2>>>(x, out, n);
  if (fixed) {
    CHECK(cudaEventRecord(read, s2));
    CHECK(cudaStreamWaitEvent(s1, read, 0));
  }
  CHECK(cudaFreeAsync(x, s1));  // the bug: s2 may still be reading x
  float *y;
  CHECK(cudaMallocAsync((void **)&y, n * sizeof(float), s1));
  CHECK(cudaMemsetAsync(y, 0xff, n * sizeof(float), s1));
  CHECK(cudaStreamSynchronize(s1));
  CHECK(cudaStreamSynchronize(s2));
  printf("async_free_raced: x %s y\n", x == y ? "shares its memory with" : "does not share memory with");
  CHECK(cudaFreeAsync(y, s1));
  CHECK(cudaStreamSynchronize(s1));
  CHECK(cudaEventDestroy(filled));
  CHECK(cudaEventDestroy(read));
  CHECK(cudaStreamDestroy(s1));
  CHECK(cudaStreamDestroy(s2));
  CHECK(cudaFree(out));
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 3 || (strcmp(argv[2], "bug") != 0 && strcmp(argv[2], "fixed") != 0)) {
    fprintf(stderr, "usage: seeded c_pool_wrong_stream|mlir_missing_async_dependency|async_free_raced bug|fixed\n");
    return 2;
  }
  int fixed = strcmp(argv[2], "fixed") == 0;
  if (strcmp(argv[1], "c_pool_wrong_stream") == 0) return c_pool_wrong_stream(fixed);
  if (strcmp(argv[1], "mlir_missing_async_dependency") == 0) return mlir_missing_async_dependency(fixed);
  if (strcmp(argv[1], "async_free_raced") == 0) return async_free_raced(fixed);
  fprintf(stderr, "seeded: unknown program %s\n", argv[1]);
  return 2;
}
