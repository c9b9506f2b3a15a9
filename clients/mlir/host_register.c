/* Runs host_register.mlir: registers a buffer and a subview inside it, doubles the subview's
 * elements in place on the device; data[i] = 2 * i inside the subview, i outside. */
#include "harness.h"

void _mlir_ciface_host_register(memref_i32 *data, int64_t offset, int64_t len);

int main(int argc, char **argv) {
    enum { N = 1 << 16, OFFSET = 4096, LEN = 8192 };
    /* Page-aligned, as registered memory usually is (the driver rounds to pages anyway). */
    int32_t *data = aligned_alloc(4096, N * sizeof(int32_t));
    if (!data) return 2;
    memref_i32 d = MEMREF_OF(int32_t, data, N);
    long n = iterations(argc, argv, 200);
    double total = 0, first = 0;
    for (long it = 0; it <= n; it++) {
        for (long i = 0; i < N; i++) data[i] = (int32_t)i;
        double start = now_us();
        _mlir_ciface_host_register(&d, OFFSET, LEN);
        double took = now_us() - start;
        if (it == 0) first = took; else total += took;
        for (long i = 0; i < N; i++) {
            int inside = i >= OFFSET && i < OFFSET + LEN;
            expect_eq("host_register", i, data[i], inside ? 2 * i : i);
        }
    }
    report("host_register", n, first, total);
    free(data);
    return 0;
}
