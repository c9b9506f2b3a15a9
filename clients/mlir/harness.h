/* What every MLIR client program's C main shares: 1-D memref descriptors as MLIR's C
 * interface passes them, the iteration count from the command line, a clock, and the report
 * line. Each program runs its MLIR function once (the first run loads the kernels), then N
 * more times, checks every result, and prints the time per iteration. */
#ifndef MLIR_CLIENT_HARNESS_H
#define MLIR_CLIENT_HARNESS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* A ranked 1-D memref as `llvm.emit_c_interface` functions take it. */
#define MEMREF_1D(T)                                                                       \
    struct {                                                                               \
        T *allocated;                                                                      \
        T *aligned;                                                                        \
        int64_t offset;                                                                    \
        int64_t sizes[1];                                                                  \
        int64_t strides[1];                                                                \
    }

typedef MEMREF_1D(float) memref_f32;
typedef MEMREF_1D(int32_t) memref_i32;
typedef MEMREF_1D(int16_t) memref_i16;

#define MEMREF_OF(T, data, n) {(data), (data), 0, {(n)}, {1}}

static inline double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Iterations after the first: argv[1], else `fallback`. */
static inline long iterations(int argc, char **argv, long fallback) {
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : fallback;
    return n > 0 ? n : fallback;
}

/* Exits with a message naming the first wrong element. */
static inline void expect_eq(const char *program, long index, double got, double want) {
    if (got != want) {
        fprintf(stderr, "%s: FAILED: element %ld is %g, expected %g\n", program, index, got,
                want);
        exit(1);
    }
}

static inline void report(const char *program, long n, double first_us, double total_us) {
    printf("%s: ok: %ld iterations, %.2f us per iteration (first %.1f us)\n", program, n,
           total_us / n, first_us);
}

#endif
