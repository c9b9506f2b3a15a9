/* Runs chain.mlir: 1,000 dependent launches, each adding one; data[i] = 1000. */
#include "harness.h"

void _mlir_ciface_chain(memref_i32 *out);

int main(int argc, char **argv) {
    enum { N = 256, LAUNCHES = 1000 };
    static int32_t out[N];
    memref_i32 o = MEMREF_OF(int32_t, out, N);
    long n = iterations(argc, argv, 20);
    double total = 0, first = 0;
    for (long it = 0; it <= n; it++) {
        for (long i = 0; i < N; i++) out[i] = -1;
        double start = now_us();
        _mlir_ciface_chain(&o);
        double took = now_us() - start;
        if (it == 0) first = took; else total += took;
        for (long i = 0; i < N; i++) expect_eq("chain", i, out[i], LAUNCHES);
    }
    report("chain", n, first, total);
    printf("chain: %.3f us per launch\n", total / n / LAUNCHES);
    return 0;
}
