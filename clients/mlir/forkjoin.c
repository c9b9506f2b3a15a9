/* Runs forkjoin.mlir: out[i] = (2 * in[i]) * (in[i] + 1). Arguments: iterations, then the
 * element count (default 4,096 floats, at most 1,048,576). */
#include "harness.h"

void _mlir_ciface_forkjoin(memref_f32 *in, memref_f32 *out);

int main(int argc, char **argv) {
    enum { MAX = 1 << 20 };
    static float in[MAX], out[MAX];
    long N = argc > 2 ? strtol(argv[2], NULL, 10) : 4096;
    if (N <= 0 || N > MAX) N = 4096;
    for (long i = 0; i < N; i++) in[i] = (float)(i % 1000);
    memref_f32 a = MEMREF_OF(float, in, N), b = MEMREF_OF(float, out, N);
    long n = iterations(argc, argv, 1000);
    double total = 0, first = 0;
    for (long it = 0; it <= n; it++) {
        for (long i = 0; i < N; i++) out[i] = -1;
        double start = now_us();
        _mlir_ciface_forkjoin(&a, &b);
        double took = now_us() - start;
        if (it == 0) first = took; else total += took;
        for (long i = 0; i < N; i++) expect_eq("forkjoin", i, out[i], (2 * in[i]) * (in[i] + 1));
    }
    printf("forkjoin: %ld elements\n", N);
    report("forkjoin", n, first, total);
    return 0;
}
