/* Runs shared_memory.mlir: 64 KiB of dynamic shared memory per block; each block of 16,384
 * words comes back reversed. */
#include "harness.h"

void _mlir_ciface_shared_memory(memref_i32 *in, memref_i32 *out);

int main(int argc, char **argv) {
    enum { WORDS = 16384, BLOCKS = 32, N = WORDS * BLOCKS };
    static int32_t in[N], out[N];
    for (long i = 0; i < N; i++) in[i] = (int32_t)(i * 7 + 1);
    memref_i32 a = MEMREF_OF(int32_t, in, N), b = MEMREF_OF(int32_t, out, N);
    long n = iterations(argc, argv, 500);
    double total = 0, first = 0;
    for (long it = 0; it <= n; it++) {
        for (long i = 0; i < N; i++) out[i] = -1;
        double start = now_us();
        _mlir_ciface_shared_memory(&a, &b);
        double took = now_us() - start;
        if (it == 0) first = took; else total += took;
        for (long i = 0; i < N; i++) {
            long block = i / WORDS, j = i % WORDS;
            expect_eq("shared_memory", i, out[i], in[block * WORDS + WORDS - 1 - j]);
        }
    }
    report("shared_memory", n, first, total);
    return 0;
}
