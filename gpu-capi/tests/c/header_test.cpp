/*
 * The C API's header from C++: it compiles as C++ (its declarations get C linkage, its inline
 * helpers build arguments without warnings), may be included twice, and its functions link
 * and run. Run by gpu-capi/tests/c_api.rs, which builds this file with the system's C++
 * compiler against the staticlib. Prints each failed check and exits 1 if there was one.
 */
#include "gpu_runtime.h"
#include "gpu_runtime.h"

#include <cstdio>
#include <cstring>

static int failures = 0;

static void check(bool ok, const char *what, int line) {
    if (!ok) {
        failures++;
        std::fprintf(stderr, "line %d: FAILED %s (last error: %s)\n", line, what,
                     gpurt_last_error());
    }
}

#define CHECK(cond) check((cond), #cond, __LINE__)

int main() {
    CHECK(std::strcmp(gpurt_status_name(GPURT_STATUS_OK), "GPURT_STATUS_OK") == 0);
    CHECK(gpurt_open("host") == GPURT_STATUS_OK);

    gpurt_memory_t memory = {0};
    CHECK(gpurt_alloc(0, GPURT_MEMORY_DEVICE, 256, &memory) == GPURT_STATUS_OK);
    gpurt_span_t span = gpurt_span_of(memory, 16, 64);
    CHECK(span.memory.id == memory.id && span.offset == 16 && span.len == 64);
    gpurt_arg_t args[5] = {gpurt_arg_span(span), gpurt_arg_u32(7), gpurt_arg_u64(1ull << 40),
                           gpurt_arg_f32(1.5f), gpurt_arg_u32(0)};
    CHECK(args[0].kind == GPURT_ARG_SPAN && args[0].span.len == 64);
    CHECK(args[1].kind == GPURT_ARG_U32 && args[1].u32_value == 7);
    CHECK(args[2].kind == GPURT_ARG_U64 && args[2].u64_value == (1ull << 40));
    CHECK(args[3].kind == GPURT_ARG_F32 && args[3].f32_value == 1.5f);

    gpurt_token_t filled;
    CHECK(gpurt_fill(0, span, 0x3C, nullptr, 0, &filled) == GPURT_STATUS_OK);
    unsigned char back[64] = {0};
    CHECK(gpurt_download(0, back, span, &filled, 1) == GPURT_STATUS_OK);
    bool all = true;
    for (unsigned char byte : back)
        all = all && byte == 0x3C;
    CHECK(all);
    CHECK(gpurt_free(memory) == GPURT_STATUS_OK);
    CHECK(gpurt_free(memory) == GPURT_STATUS_INVALID_HANDLE);

    gpurt_report_t report;
    CHECK(gpurt_shutdown(&report) == GPURT_STATUS_OK);
    CHECK(report.released_objects == 0 && report.unwaited_tokens == 0);
    std::printf("header_test (C++): %d failed\n", failures);
    return failures == 0 ? 0 : 1;
}
