/* Runs alloc.mlir: host_shared and device allocations; out[i] = 3 * i. */
#include "harness.h"

void _mlir_ciface_alloc(memref_i32 *out);

int main(int argc, char **argv) {
    enum { N = 1 << 14 };
    static int32_t out[N];
    memref_i32 o = MEMREF_OF(int32_t, out, N);
    long n = iterations(argc, argv, 200);
    double total = 0, first = 0;
    for (long it = 0; it <= n; it++) {
        for (long i = 0; i < N; i++) out[i] = -1;
        double start = now_us();
        _mlir_ciface_alloc(&o);
        double took = now_us() - start;
        if (it == 0) first = took; else total += took;
        for (long i = 0; i < N; i++) expect_eq("alloc", i, out[i], 3 * i);
    }
    report("alloc", n, first, total);
    return 0;
}
