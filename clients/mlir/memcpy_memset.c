/* Runs memcpy_memset.mlir: out32[i] = 0x2a2a0007, out16[i] = 0x0bad. */
#include "harness.h"

void _mlir_ciface_memcpy_memset(memref_i32 *out32, memref_i16 *out16);

int main(int argc, char **argv) {
    enum { N = 1 << 16 };
    static int32_t out32[N];
    static int16_t out16[N];
    memref_i32 a = MEMREF_OF(int32_t, out32, N);
    memref_i16 b = MEMREF_OF(int16_t, out16, N);
    long n = iterations(argc, argv, 1000);
    double total = 0, first = 0;
    for (long it = 0; it <= n; it++) {
        for (long i = 0; i < N; i++) out32[i] = -1, out16[i] = -1;
        double start = now_us();
        _mlir_ciface_memcpy_memset(&a, &b);
        double took = now_us() - start;
        if (it == 0) first = took; else total += took;
        for (long i = 0; i < N; i++) {
            expect_eq("memcpy_memset", i, out32[i], 0x2a2a0007);
            expect_eq("memcpy_memset", i, out16[i], 0x0bad);
        }
    }
    report("memcpy_memset", n, first, total);
    return 0;
}
