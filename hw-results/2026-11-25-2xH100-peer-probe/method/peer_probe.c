// Which cross-device copies the CUDA driver accepts, and at what speed, on a two-GPU box.
//
// For memory of device 0 copied to memory of device 1, each side either cuMemAlloc memory or
// stream-ordered memory from the device's default pool (cuMemAllocFromPoolAsync), the copy
// issued on device 0's or device 1's stream, with cuMemcpyAsync or cuMemcpyPeerAsync: the
// result code and whether the bytes arrived. Three states in turn: nothing enabled, context
// peer access enabled both ways (cuCtxEnablePeerAccess), and the default pools opened to the
// other device as well (cuMemPoolSetAccess). Then bandwidth (64 and 256 MiB, both directions)
// and 4 KiB latency, with and without peer access.
//
// Build and run on the GPU box: nvcc -O2 peer_probe.c -lcuda -o peer_probe && ./peer_probe
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                        \
    do {                                                                                   \
        CUresult r_ = (call);                                                              \
        if (r_ != CUDA_SUCCESS) {                                                          \
            const char *n_ = "?";                                                          \
            cuGetErrorName(r_, &n_);                                                       \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, n_);      \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

static CUcontext ctx[2];
static CUstream stream[2];
static CUmemoryPool pool[2];

static const char *name_of(CUresult r) {
    const char *n = "?";
    cuGetErrorName(r, &n);
    return n;
}

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

// One buffer of `bytes` on device `d`, of cuMemAlloc (pooled = 0) or the default pool.
static CUdeviceptr buffer(int d, int pooled, size_t bytes) {
    CUdeviceptr p;
    CHECK(cuCtxSetCurrent(ctx[d]));
    if (pooled) {
        CHECK(cuMemAllocFromPoolAsync(&p, bytes, pool[d], stream[d]));
        CHECK(cuStreamSynchronize(stream[d]));
    } else {
        CHECK(cuMemAlloc(&p, bytes));
    }
    return p;
}

static void release(int d, int pooled, CUdeviceptr p) {
    CHECK(cuCtxSetCurrent(ctx[d]));
    if (pooled) {
        CHECK(cuMemFreeAsync(p, stream[d]));
        CHECK(cuStreamSynchronize(stream[d]));
    } else {
        CHECK(cuMemFree(p));
    }
}

static void matrix(const char *state) {
    const size_t bytes = 1 << 20;
    printf("\n## %s\n| src (dev 0) | dst (dev 1) | stream | call | result | bytes arrived |\n"
           "|---|---|---|---|---|---|\n",
           state);
    for (int src_pooled = 0; src_pooled < 2; src_pooled++)
        for (int dst_pooled = 0; dst_pooled < 2; dst_pooled++)
            for (int s = 0; s < 2; s++)
                for (int peer_call = 0; peer_call < 2; peer_call++) {
                    CUdeviceptr src = buffer(0, src_pooled, bytes);
                    CUdeviceptr dst = buffer(1, dst_pooled, bytes);
                    unsigned char pattern = (unsigned char)(0x11 + src_pooled * 8 + dst_pooled * 4 +
                                                            s * 2 + peer_call);
                    CHECK(cuCtxSetCurrent(ctx[0]));
                    // The synchronous memsets run on the legacy stream, which the
                    // non-blocking streams do not wait for: synchronise before copying.
                    CHECK(cuMemsetD8(src, pattern, bytes));
                    CHECK(cuCtxSynchronize());
                    CHECK(cuCtxSetCurrent(ctx[1]));
                    CHECK(cuMemsetD8(dst, 0, bytes));
                    CHECK(cuCtxSynchronize());
                    CHECK(cuCtxSetCurrent(ctx[s]));
                    CUresult r = peer_call
                                     ? cuMemcpyPeerAsync(dst, ctx[1], src, ctx[0], bytes, stream[s])
                                     : cuMemcpyAsync(dst, src, bytes, stream[s]);
                    CUresult sync = cuStreamSynchronize(stream[s]);
                    int arrived = 0;
                    if (r == CUDA_SUCCESS && sync == CUDA_SUCCESS) {
                        unsigned char *host = (unsigned char *)malloc(bytes);
                        CHECK(cuCtxSetCurrent(ctx[1]));
                        CHECK(cuMemcpyDtoH(host, dst, bytes));
                        arrived = 1;
                        for (size_t i = 0; i < bytes; i++) arrived &= host[i] == pattern;
                        free(host);
                    }
                    printf("| %s | %s | device %d | %s | %s%s%s | %s |\n",
                           src_pooled ? "pool" : "cuMemAlloc", dst_pooled ? "pool" : "cuMemAlloc",
                           s, peer_call ? "cuMemcpyPeerAsync" : "cuMemcpyAsync", name_of(r),
                           sync == CUDA_SUCCESS ? "" : ", sync ", sync == CUDA_SUCCESS ? "" : name_of(sync),
                           arrived ? "yes" : "no");
                    release(0, src_pooled, src);
                    release(1, dst_pooled, dst);
                }
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// Best-of-10 bandwidth, in GB/s, of a copy from device `from` to device `to` on `to`'s stream.
static double bandwidth(int from, int to, size_t bytes, int peer_call) {
    CUdeviceptr src = buffer(from, 0, bytes), dst = buffer(to, 0, bytes);
    CHECK(cuCtxSetCurrent(ctx[to]));
    double best = 0;
    for (int i = 0; i < 11; i++) {
        double t0 = now_us();
        if (peer_call)
            CHECK(cuMemcpyPeerAsync(dst, ctx[to], src, ctx[from], bytes, stream[to]));
        else
            CHECK(cuMemcpyAsync(dst, src, bytes, stream[to]));
        CHECK(cuStreamSynchronize(stream[to]));
        double rate = bytes / (now_us() - t0) / 1e3;
        if (i > 0 && rate > best) best = rate;
    }
    release(from, 0, src);
    release(to, 0, dst);
    return best;
}

// Median microseconds of a 4 KiB copy device 0 -> 1 issued and synchronised.
static double latency(int peer_call) {
    const size_t bytes = 4096;
    CUdeviceptr src = buffer(0, 0, bytes), dst = buffer(1, 0, bytes);
    CHECK(cuCtxSetCurrent(ctx[1]));
    double t[501];
    for (int i = 0; i < 501; i++) {
        double t0 = now_us();
        if (peer_call)
            CHECK(cuMemcpyPeerAsync(dst, ctx[1], src, ctx[0], bytes, stream[1]));
        else
            CHECK(cuMemcpyAsync(dst, src, bytes, stream[1]));
        CHECK(cuStreamSynchronize(stream[1]));
        t[i] = now_us() - t0;
    }
    qsort(t, 501, sizeof t[0], compare_doubles);
    release(0, 0, src);
    release(1, 0, dst);
    return t[250];
}

static void speeds(const char *state) {
    printf("\n## speed, %s\n| copy | call | GB/s (best of 10) |\n|---|---|---|\n", state);
    size_t sizes[2] = {64u << 20, 256u << 20};
    for (int k = 0; k < 2; k++)
        for (int dir = 0; dir < 2; dir++)
            for (int peer_call = 0; peer_call < 2; peer_call++)
                printf("| %zu MiB, %d -> %d | %s | %.1f |\n", sizes[k] >> 20, dir, 1 - dir,
                       peer_call ? "cuMemcpyPeerAsync" : "cuMemcpyAsync",
                       bandwidth(dir, 1 - dir, sizes[k], peer_call));
    for (int peer_call = 0; peer_call < 2; peer_call++)
        printf("| 4 KiB latency 0 -> 1 | %s | %.2f us (median of 501) |\n",
               peer_call ? "cuMemcpyPeerAsync" : "cuMemcpyAsync", latency(peer_call));
}

int main(void) {
    int count = 0;
    CHECK(cuInit(0));
    CHECK(cuDeviceGetCount(&count));
    if (count < 2) {
        printf("peer_probe: skipped: %d device(s)\n", count);
        return 0;
    }
    for (int d = 0; d < 2; d++) {
        CUdevice dev;
        CHECK(cuDeviceGet(&dev, d));
        CHECK(cuDevicePrimaryCtxRetain(&ctx[d], dev));
        CHECK(cuCtxSetCurrent(ctx[d]));
        CHECK(cuStreamCreate(&stream[d], CU_STREAM_NON_BLOCKING));
        CHECK(cuDeviceGetDefaultMemPool(&pool[d], dev));
    }
    int can01 = 0, can10 = 0;
    CHECK(cuDeviceCanAccessPeer(&can01, 0, 1));
    CHECK(cuDeviceCanAccessPeer(&can10, 1, 0));
    printf("cuDeviceCanAccessPeer: 0->1 %d, 1->0 %d\n", can01, can10);

    matrix("no peer access");
    speeds("no peer access");

    for (int d = 0; d < 2; d++) {
        CHECK(cuCtxSetCurrent(ctx[d]));
        CHECK(cuCtxEnablePeerAccess(ctx[1 - d], 0));
    }
    CHECK(cuCtxSetCurrent(ctx[0]));
    printf("\ncuCtxEnablePeerAccess again: %s\n", name_of(cuCtxEnablePeerAccess(ctx[1], 0)));
    matrix("context peer access enabled both ways");
    speeds("context peer access enabled both ways");

    for (int d = 0; d < 2; d++) {
        CUmemAccessDesc access;
        memset(&access, 0, sizeof access);
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = 1 - d;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        CHECK(cuMemPoolSetAccess(pool[d], &access, 1));
    }
    matrix("context peer access and pool access both ways");

    // Does a context's peer access survive cuDevicePrimaryCtxReset of the peer?
    printf("\npeer_probe: done\n");
    return 0;
}
