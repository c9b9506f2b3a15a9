/* Runs two_devices.mlir on device 0, then on device 1 where there is one, and asks the CUDA
 * driver (opened at run time, so nothing links it) which device each buffer is on. With one
 * device it says so and checks device 0 only. */
#include <dlfcn.h>

#include "harness.h"

void _mlir_ciface_fill_on(memref_i32 *result, int32_t device, memref_i32 *out);
void _mlir_ciface_release(memref_i32 *buf);

typedef int (*cu_init_t)(unsigned);
typedef int (*cu_count_t)(int *);
typedef int (*cu_pointer_attribute_t)(void *, int, uint64_t);
enum { CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9 };

/* The device the driver says `ptr` belongs to, or -1 when it cannot tell. */
static int device_of(void *cuda, void *ptr) {
    cu_pointer_attribute_t attribute = (cu_pointer_attribute_t)dlsym(cuda, "cuPointerGetAttribute");
    int ordinal = -1;
    if (!attribute || attribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (uint64_t)(uintptr_t)ptr))
        return -1;
    return ordinal;
}

int main(int argc, char **argv) {
    enum { N = 4096 };
    static int32_t out[N];
    memref_i32 o = MEMREF_OF(int32_t, out, N);
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    int devices = 1;
    if (cuda) {
        cu_init_t init = (cu_init_t)dlsym(cuda, "cuInit");
        cu_count_t count = (cu_count_t)dlsym(cuda, "cuDeviceGetCount");
        if (!init || init(0) || !count || count(&devices)) devices = 1;
    }
    long n = iterations(argc, argv, 100);
    int last = devices >= 2 ? 1 : 0;
    if (devices < 2) printf("two_devices: skipped device 1: this machine has one device\n");
    double total = 0, first = 0;
    int failed = 0;
    for (long it = 0; it <= n; it++) {
        for (int device = 0; device <= last; device++) {
            for (long i = 0; i < N; i++) out[i] = -1;
            memref_i32 buf;
            double start = now_us();
            _mlir_ciface_fill_on(&buf, device, &o);
            double took = now_us() - start;
            if (it == 0 && device == 0) first = took; else if (it > 0) total += took;
            int where = cuda ? device_of(cuda, buf.aligned) : -1;
            if (it == 0 || where != device) {
                printf("two_devices: asked for device %d: buffer on device %d (%s)\n", device,
                       where, where == device ? "honoured" : "NOT honoured");
                failed |= where != device && where != -1;
            }
            _mlir_ciface_release(&buf);
            for (long i = 0; i < N; i++) expect_eq("two_devices", i, out[i], 7 + device);
        }
    }
    report("two_devices", n, first, total);
    return failed;
}
