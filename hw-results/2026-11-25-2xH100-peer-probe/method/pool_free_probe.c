// Which ways of freeing stream-ordered (pool) memory compute-sanitizer's leak check accepts,
// on two GPUs. Variant (argv[1]): 0 cuMemFreeAsync on the own device's stream; 1 cuMemFree;
// 2 cuMemFreeAsync on the other device's stream (own context current); 3 as 0 after
// cuMemPoolSetAccess opened the pool to the other device; 4 as 1 after that.
// Build and run: nvcc -O2 pool_free_probe.c -lcuda -o p && for v in 0 1 2 3 4; do
//   compute-sanitizer --leak-check full ./p $v; done
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                        \
    do {                                                                                   \
        CUresult r_ = (call);                                                              \
        if (r_ != CUDA_SUCCESS) {                                                          \
            const char *n_ = "?";                                                          \
            cuGetErrorName(r_, &n_);                                                       \
            printf("%s failed: %s\n", #call, n_);                                          \
        }                                                                                  \
    } while (0)

int main(int argc, char **argv) {
    int variant = argc > 1 ? atoi(argv[1]) : 0;
    CUcontext ctx[2];
    CUstream stream[2];
    CUmemoryPool pool[2];
    CHECK(cuInit(0));
    for (int d = 0; d < 2; d++) {
        CUdevice dev;
        CHECK(cuDeviceGet(&dev, d));
        CHECK(cuDevicePrimaryCtxRetain(&ctx[d], dev));
        CHECK(cuCtxSetCurrent(ctx[d]));
        CHECK(cuStreamCreate(&stream[d], CU_STREAM_NON_BLOCKING));
        CHECK(cuDeviceGetDefaultMemPool(&pool[d], dev));
    }
    if (variant >= 3) {
        CUmemAccessDesc access;
        memset(&access, 0, sizeof access);
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = 1;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        CHECK(cuMemPoolSetAccess(pool[0], &access, 1));
    }
    CHECK(cuCtxSetCurrent(ctx[0]));
    CUdeviceptr p;
    CHECK(cuMemAllocFromPoolAsync(&p, 2 << 20, pool[0], stream[0]));
    CHECK(cuStreamSynchronize(stream[0]));
    switch (variant) {
    case 0: case 3: CHECK(cuMemFreeAsync(p, stream[0])); break;
    case 1: case 4: CHECK(cuMemFree(p)); break;
    case 2: CHECK(cuMemFreeAsync(p, stream[1])); break;
    }
    CHECK(cuCtxSynchronize());
    CHECK(cuCtxSetCurrent(ctx[1]));
    CHECK(cuCtxSynchronize());
    printf("variant %d done\n", variant);
    return 0;
}
