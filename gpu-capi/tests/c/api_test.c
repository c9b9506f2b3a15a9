/*
 * The whole C API on the host backend, bad input included: every call's status is checked, and
 * every result is read back and compared. Run by gpu-capi/tests/c_api.rs, which builds this
 * file with the cc crate against the staticlib; argument 1 is the path for the trace file.
 * Prints each failed check and exits 1 if there was one.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_runtime.h"
/* Included twice on purpose: the include guard must cover the whole header, helpers included. */
#include "gpu_runtime.h"

static int checks, failures;

static void check(int ok, const char *what, int line) {
    checks++;
    if (!ok) {
        failures++;
        fprintf(stderr, "line %d: FAILED %s (last error: %s)\n", line, what, gpurt_last_error());
    }
}

#define CHECK(cond) check((cond), #cond, __LINE__)
/* A call's status must be `expected`, and a failure must leave a message. */
#define EXPECT(expected, call)                                                                  \
    do {                                                                                        \
        gpurt_status_t got_ = (call);                                                             \
        check(got_ == (expected), #call " == " #expected, __LINE__);                            \
        if (got_ != (expected))                                                                 \
            fprintf(stderr, "    got %s\n", gpurt_status_name((int32_t)got_));                  \
        if ((expected) != GPURT_STATUS_OK)                                                      \
            check(gpurt_last_error()[0] != '\0', "a message for " #call, __LINE__);             \
    } while (0)
#define OK(call) EXPECT(GPURT_STATUS_OK, call)

static const gpurt_dims_t LINEAR = {{4, 1, 1}, {64, 1, 1}, 0};

/* Reads device memory back into `out` through a download. */
static void read_back(uint32_t device, void *out, gpurt_span_t span, gpurt_token_t *after, size_t n) {
    OK(gpurt_download(device, out, span, after, n));
}

static int all_bytes(const unsigned char *bytes, size_t len, unsigned char value) {
    for (size_t i = 0; i < len; i++)
        if (bytes[i] != value)
            return 0;
    return 1;
}

static void open_and_status_names(void) {
    CHECK(strcmp(gpurt_last_error(), "") == 0);
    CHECK(strcmp(gpurt_status_name(GPURT_STATUS_OK), "GPURT_STATUS_OK") == 0);
    CHECK(strcmp(gpurt_status_name(GPURT_STATUS_OVERLAP), "GPURT_STATUS_OVERLAP") == 0);
    CHECK(strcmp(gpurt_status_name(-3), "unknown status") == 0);
    EXPECT(GPURT_STATUS_NOT_OPEN, gpurt_shutdown(NULL));
    EXPECT(GPURT_STATUS_INVALID_ARGUMENT, gpurt_open("vulkan"));
    CHECK(strstr(gpurt_last_error(), "vulkan") != NULL);
    EXPECT(GPURT_STATUS_BACKEND_UNAVAILABLE, gpurt_open("hip"));
    OK(gpurt_open("host"));
    OK(gpurt_open(NULL));
    OK(gpurt_open("host"));
    EXPECT(GPURT_STATUS_INVALID_ARGUMENT, gpurt_open("cuda"));
    CHECK(strstr(gpurt_last_error(), "already open") != NULL);
    size_t devices = 0;
    OK(gpurt_device_count(&devices));
    CHECK(devices == 2);
    EXPECT(GPURT_STATUS_NULL_POINTER, gpurt_device_count(NULL));
}

static void device_memory_fill_copy_and_bad_spans(void) {
    gpurt_memory_t a = {0}, b = {0}, other = {0};
    OK(gpurt_alloc(0, GPURT_MEMORY_DEVICE, 4096, &a));
    OK(gpurt_alloc(0, GPURT_MEMORY_DEVICE, 4096, &b));
    OK(gpurt_alloc(1, GPURT_MEMORY_DEVICE, 4096, &other));
    CHECK(a.id != 0 && b.id != 0 && a.id != b.id);
    gpurt_memory_info_t info;
    OK(gpurt_memory_info(a, &info));
    CHECK(info.size == 4096 && info.kind == GPURT_MEMORY_DEVICE && info.device == 0);
    CHECK(info.address != NULL);

    gpurt_token_t filled, copied;
    OK(gpurt_fill(0, gpurt_span_of(a, 0, 4096), 0xAB, NULL, 0, &filled));
    OK(gpurt_copy(0, gpurt_span_of(b, 0, 4096), gpurt_span_of(a, 0, 4096), &filled, 1, &copied));
    unsigned char host[4096];
    memset(host, 0, sizeof host);
    read_back(0, host, gpurt_span_of(b, 0, 4096), &copied, 1);
    CHECK(all_bytes(host, sizeof host, 0xAB));

    gpurt_token_t t;
    /* Bad spans and arguments: nothing is enqueued, the out-token is untouched. */
    EXPECT(GPURT_STATUS_OUT_OF_BOUNDS, gpurt_fill(0, gpurt_span_of(a, 4000, 200), 1, NULL, 0, &t));
    EXPECT(GPURT_STATUS_OUT_OF_BOUNDS,
           gpurt_fill(0, gpurt_span_of(a, SIZE_MAX, 2), 1, NULL, 0, &t));
    EXPECT(GPURT_STATUS_ZERO_SIZE, gpurt_fill(0, gpurt_span_of(a, 0, 0), 1, NULL, 0, &t));
    EXPECT(GPURT_STATUS_OUT_OF_BOUNDS,
           gpurt_copy(0, gpurt_span_of(b, 0, 100), gpurt_span_of(a, 0, 200), NULL, 0, &t));
    EXPECT(GPURT_STATUS_OVERLAP,
           gpurt_copy(0, gpurt_span_of(a, 64, 128), gpurt_span_of(a, 0, 128), NULL, 0, &t));
    EXPECT(GPURT_STATUS_WRONG_DEVICE,
           gpurt_fill(0, gpurt_span_of(other, 0, 16), 1, NULL, 0, &t));
    EXPECT(GPURT_STATUS_NULL_POINTER, gpurt_fill(0, gpurt_span_of(a, 0, 16), 1, NULL, 0, NULL));
    EXPECT(GPURT_STATUS_NULL_POINTER, gpurt_fill(0, gpurt_span_of(a, 0, 16), 1, NULL, 2, &t));
    gpurt_memory_t null_memory = {0};
    EXPECT(GPURT_STATUS_NULL_POINTER,
           gpurt_fill(0, gpurt_span_of(null_memory, 0, 16), 1, NULL, 0, &t));
    EXPECT(GPURT_STATUS_NULL_POINTER, gpurt_download(0, NULL, gpurt_span_of(a, 0, 16), NULL, 0));

    /* Allocation errors. */
    gpurt_memory_t m;
    EXPECT(GPURT_STATUS_ZERO_SIZE, gpurt_alloc(0, GPURT_MEMORY_DEVICE, 0, &m));
    EXPECT(GPURT_STATUS_INVALID_ARGUMENT, gpurt_alloc(0, 9, 64, &m));
    EXPECT(GPURT_STATUS_INVALID_ARGUMENT, gpurt_alloc(0, GPURT_MEMORY_REGISTERED, 64, &m));
    EXPECT(GPURT_STATUS_UNKNOWN_DEVICE, gpurt_alloc(5, GPURT_MEMORY_DEVICE, 64, &m));
    EXPECT(GPURT_STATUS_NULL_POINTER, gpurt_alloc(0, GPURT_MEMORY_DEVICE, 64, NULL));
    EXPECT(GPURT_STATUS_OUT_OF_MEMORY, gpurt_alloc(0, GPURT_MEMORY_DEVICE, SIZE_MAX / 2, &m));

    /* Frees: double, null, foreign, wrong kind. */
    OK(gpurt_free(b));
    EXPECT(GPURT_STATUS_INVALID_HANDLE, gpurt_free(b));
    CHECK(strstr(gpurt_last_error(), "already released") != NULL);
    EXPECT(GPURT_STATUS_INVALID_HANDLE, gpurt_fill(0, gpurt_span_of(b, 0, 16), 1, NULL, 0, &t));
    EXPECT(GPURT_STATUS_NULL_POINTER, gpurt_free(null_memory));
    gpurt_memory_t foreign = {(uint64_t)(uintptr_t)host};
    EXPECT(GPURT_STATUS_INVALID_HANDLE, gpurt_free(foreign));
    CHECK(strstr(gpurt_last_error(), "not a handle of this library") != NULL);
    gpurt_kernel_t kernel;
    OK(gpurt_kernel(0, "fill_u32", &kernel));
    gpurt_memory_t kernel_as_memory = {kernel.id};
    EXPECT(GPURT_STATUS_INVALID_HANDLE, gpurt_free(kernel_as_memory));
    CHECK(strstr(gpurt_last_error(), "kernel handle") != NULL);
    OK(gpurt_free(a));
    OK(gpurt_free(other));
}

static void stream_ordered_allocation_upload_and_download(void) {
    unsigned char data[10000], back[10000];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (unsigned char)(i * 7);
    gpurt_memory_t m;
    gpurt_token_t ready, uploaded;
    OK(gpurt_alloc_after(1, GPURT_MEMORY_DEVICE, sizeof data, NULL, 0, &m, &ready));
    OK(gpurt_upload(1, gpurt_span_of(m, 0, sizeof data), data, &ready, 1, &uploaded));
    memset(back, 0, sizeof back);
    read_back(1, back, gpurt_span_of(m, 0, sizeof data), &uploaded, 1);
    CHECK(memcmp(data, back, sizeof data) == 0);
    gpurt_token_t t;
    EXPECT(GPURT_STATUS_NULL_POINTER,
           gpurt_upload(1, gpurt_span_of(m, 0, 16), NULL, NULL, 0, &t));
    EXPECT(GPURT_STATUS_NULL_POINTER,
           gpurt_alloc_after(1, GPURT_MEMORY_DEVICE, 64, NULL, 0, &m, NULL));
    OK(gpurt_free(m));
}

static void pinned_and_managed_memory_are_reached_from_the_host(void) {
    gpurt_memory_t pinned, device, managed;
    OK(gpurt_alloc(0, GPURT_MEMORY_PINNED, 1024, &pinned));
    OK(gpurt_alloc(0, GPURT_MEMORY_DEVICE, 1024, &device));
    OK(gpurt_alloc(0, GPURT_MEMORY_MANAGED, 1024, &managed));
    gpurt_memory_info_t p, mi;
    OK(gpurt_memory_info(pinned, &p));
    OK(gpurt_memory_info(managed, &mi));
    CHECK(p.kind == GPURT_MEMORY_PINNED && mi.kind == GPURT_MEMORY_MANAGED);
    for (int i = 0; i < 1024; i++)
        ((unsigned char *)p.address)[i] = (unsigned char)i;
    gpurt_token_t up, down;
    OK(gpurt_copy(0, gpurt_span_of(device, 0, 1024), gpurt_span_of(pinned, 0, 1024), NULL, 0,
                  &up));
    OK(gpurt_copy(0, gpurt_span_of(managed, 0, 1024), gpurt_span_of(device, 0, 1024), &up, 1,
                  &down));
    OK(gpurt_wait(down));
    CHECK(memcmp(p.address, mi.address, 1024) == 0);
    OK(gpurt_free(pinned));
    OK(gpurt_free(device));
    OK(gpurt_free(managed));
}

static void kernels_by_handle(void) {
    gpurt_kernel_t fill, again, axpy;
    OK(gpurt_kernel(0, "fill_u32", &fill));
    OK(gpurt_kernel(0, "fill_u32", &again));
    CHECK(fill.id == again.id);
    OK(gpurt_kernel(0, "axpy_f32", &axpy));
    EXPECT(GPURT_STATUS_UNKNOWN_KERNEL, gpurt_kernel(0, "no_such_kernel", &again));
    EXPECT(GPURT_STATUS_NULL_POINTER, gpurt_kernel(0, NULL, &again));
    EXPECT(GPURT_STATUS_UNKNOWN_DEVICE, gpurt_kernel(3, "fill_u32", &again));

    enum { N = 1000 };
    gpurt_memory_t words, xs;
    OK(gpurt_alloc(0, GPURT_MEMORY_DEVICE, N * 4, &words));
    OK(gpurt_alloc(0, GPURT_MEMORY_DEVICE, N * 4, &xs));
    /* fill_u32 takes (dst, u32 value, u64 count): the float bits of 1.5 and 2 as values. */
    float one_and_a_half = 1.5f, two = 2.0f;
    uint32_t bits;
    memcpy(&bits, &one_and_a_half, 4);
    gpurt_arg_t fill_y[3] = {gpurt_arg_span(gpurt_span_of(words, 0, N * 4)), gpurt_arg_u32(bits),
                           gpurt_arg_u64(N)};
    gpurt_token_t y_ready, x_ready, done;
    OK(gpurt_launch(fill, &LINEAR, fill_y, 3, NULL, 0, &y_ready));
    memcpy(&bits, &two, 4);
    gpurt_arg_t fill_x[3] = {gpurt_arg_span(gpurt_span_of(xs, 0, N * 4)), gpurt_arg_u32(bits),
                           gpurt_arg_u64(N)};
    OK(gpurt_launch(fill, &LINEAR, fill_x, 3, NULL, 0, &x_ready));
    /* y = 3 * x + y = 7.5 */
    gpurt_arg_t axpy_args[4] = {gpurt_arg_f32(3.0f),
                              gpurt_arg_span(gpurt_span_of(xs, 0, N * 4)),
                              gpurt_arg_span(gpurt_span_of(words, 0, N * 4)), gpurt_arg_u64(N)};
    gpurt_token_t inputs[2] = {y_ready, x_ready};
    OK(gpurt_launch(axpy, &LINEAR, axpy_args, 4, inputs, 2, &done));
    float ys[N];
    read_back(0, ys, gpurt_span_of(words, 0, N * 4), &done, 1);
    int all_right = 1;
    for (int i = 0; i < N; i++)
        all_right &= ys[i] == 7.5f;
    CHECK(all_right);

    gpurt_token_t t;
    gpurt_arg_t bad_kind[3] = {fill_y[0], fill_y[1], fill_y[2]};
    bad_kind[2].kind = 77;
    EXPECT(GPURT_STATUS_INVALID_ARGUMENT, gpurt_launch(fill, &LINEAR, bad_kind, 3, NULL, 0, &t));
    EXPECT(GPURT_STATUS_NULL_POINTER, gpurt_launch(fill, NULL, fill_y, 3, NULL, 0, &t));
    EXPECT(GPURT_STATUS_NULL_POINTER, gpurt_launch(fill, &LINEAR, NULL, 3, NULL, 0, &t));
    gpurt_kernel_t stale = {fill.id + 1000};
    EXPECT(GPURT_STATUS_INVALID_HANDLE, gpurt_launch(stale, &LINEAR, fill_y, 3, NULL, 0, &t));
    OK(gpurt_free(words));
    OK(gpurt_free(xs));
}

/* Dynamic workgroup memory above the device's default limit: the runtime opts in once per
 * kernel and size; a request above the device's opt-in limit is refused at launch. */
static void workgroup_memory_above_the_default_limit(void) {
    enum { W = 16384, GROUPS = 2 }; /* 64 KiB of workgroup memory per group */
    static uint32_t words[W * GROUPS], back[W * GROUPS];
    for (uint32_t i = 0; i < W * GROUPS; i++)
        words[i] = i;
    gpurt_kernel_t reverse;
    gpurt_memory_t data;
    gpurt_token_t in, done, t;
    OK(gpurt_kernel(1, "workgroup_reverse_u32", &reverse));
    OK(gpurt_alloc(1, GPURT_MEMORY_DEVICE, sizeof words, &data));
    OK(gpurt_upload(1, gpurt_span_of(data, 0, sizeof words), words, NULL, 0, &in));
    gpurt_dims_t dims = {{GROUPS, 1, 1}, {256, 1, 1}, W * 4};
    gpurt_arg_t args[2] = {gpurt_arg_span(gpurt_span_of(data, 0, sizeof words)),
                           gpurt_arg_u32(W)};
    OK(gpurt_launch(reverse, &dims, args, 2, &in, 1, &done));
    read_back(1, back, gpurt_span_of(data, 0, sizeof back), &done, 1);
    int all_right = 1;
    for (uint32_t g = 0; g < GROUPS; g++)
        for (uint32_t i = 0; i < W; i++)
            all_right &= back[g * W + i] == g * W + (W - 1 - i) + 1;
    CHECK(all_right);
    gpurt_dims_t too_big = {{1, 1, 1}, {256, 1, 1}, 1u << 24};
    EXPECT(GPURT_STATUS_LIMIT_EXCEEDED, gpurt_launch(reverse, &too_big, args, 2, NULL, 0, &t));
    OK(gpurt_free(data));
}

static void registered_memory_nests_and_carries_transfers(void) {
    enum { LEN = 1 << 16 };
    unsigned char *host = calloc(LEN, 1);
    CHECK(host != NULL);
    gpurt_stats_t before, after;
    OK(gpurt_stats(&before));
    gpurt_memory_t outer, inner, m;
    OK(gpurt_host_register(host, LEN, &outer));
    OK(gpurt_host_register(host + 1024, 2048, &inner));
    OK(gpurt_stats(&after));
    CHECK(after.driver_pins == before.driver_pins + 1);
    CHECK(after.nested_locks == before.nested_locks + 1);
    CHECK(after.locked_ranges == before.locked_ranges + 1);
    EXPECT(GPURT_STATUS_OVERLAP, gpurt_host_register(host + LEN - 16, 64, &m));
    EXPECT(GPURT_STATUS_NULL_POINTER, gpurt_host_register(NULL, 64, &m));
    EXPECT(GPURT_STATUS_ZERO_SIZE, gpurt_host_register(host, 0, &m));
    gpurt_memory_info_t info;
    OK(gpurt_memory_info(inner, &info));
    CHECK(info.kind == GPURT_MEMORY_REGISTERED && info.address == host + 1024);
    CHECK(info.size == 2048);

    gpurt_memory_t device;
    gpurt_token_t filled, copied;
    OK(gpurt_alloc(1, GPURT_MEMORY_DEVICE, 2048, &device));
    OK(gpurt_fill(1, gpurt_span_of(device, 0, 2048), 0x5A, NULL, 0, &filled));
    OK(gpurt_copy(1, gpurt_span_of(inner, 0, 2048), gpurt_span_of(device, 0, 2048), &filled, 1,
                  &copied));
    OK(gpurt_wait(copied));
    CHECK(all_bytes(host + 1024, 2048, 0x5A));
    CHECK(all_bytes(host, 1024, 0) && all_bytes(host + 3072, LEN - 3072, 0));

    EXPECT(GPURT_STATUS_INVALID_ARGUMENT, gpurt_free(inner));
    CHECK(strstr(gpurt_last_error(), "gpurt_host_unregister") != NULL);
    EXPECT(GPURT_STATUS_INVALID_ARGUMENT, gpurt_host_unregister(device));
    OK(gpurt_host_unregister(inner));
    EXPECT(GPURT_STATUS_INVALID_HANDLE, gpurt_host_unregister(inner));
    void *address = NULL;
    OK(gpurt_lookup(host, LEN, 0, &address));
    CHECK(address != NULL);
    OK(gpurt_host_unregister(outer));
    OK(gpurt_lookup(host, LEN, 0, &address));
    CHECK(address == NULL);
    OK(gpurt_free(device));
    free(host);
}

/* A registration owns its pin: `gpurt_unlock` never takes it away (a `gpurt_lock` nested in it
 * is still `gpurt_unlock`'s to release), the registration keeps carrying transfers, and the
 * statistics count the locks of each kind. */
static void a_registration_is_kept_from_raw_unlocks(void) {
    enum { LEN = 4096 };
    unsigned char *host = calloc(LEN, 1);
    CHECK(host != NULL);
    CHECK(strcmp(gpurt_status_name(GPURT_STATUS_PIN_OWNED), "GPURT_STATUS_PIN_OWNED") == 0);
    gpurt_stats_t before, after;
    OK(gpurt_stats(&before));
    gpurt_memory_t registered, device;
    OK(gpurt_host_register(host, LEN, &registered));
    EXPECT(GPURT_STATUS_PIN_OWNED, gpurt_unlock(host));
    CHECK(strstr(gpurt_last_error(), "gpurt_host_unregister") != NULL);
    EXPECT(GPURT_STATUS_PIN_OWNED, gpurt_unlock(host + 100));
    void *address = NULL;
    OK(gpurt_lookup(host, LEN, 0, &address));
    CHECK(address != NULL);

    OK(gpurt_lock(host + 64, 64));
    OK(gpurt_stats(&after));
    CHECK(after.raw_locks == before.raw_locks + 1);
    CHECK(after.registered_locks == before.registered_locks + 1);
    CHECK(after.driver_pins == before.driver_pins + 1);
    OK(gpurt_unlock(host));
    EXPECT(GPURT_STATUS_PIN_OWNED, gpurt_unlock(host));
    OK(gpurt_stats(&after));
    CHECK(after.raw_locks == before.raw_locks);
    CHECK(after.registered_locks == before.registered_locks + 1);
    CHECK(after.driver_unpins == before.driver_unpins);

    gpurt_token_t filled, copied;
    OK(gpurt_alloc(0, GPURT_MEMORY_DEVICE, LEN, &device));
    OK(gpurt_fill(0, gpurt_span_of(device, 0, LEN), 0x3C, NULL, 0, &filled));
    OK(gpurt_copy(0, gpurt_span_of(registered, 0, LEN), gpurt_span_of(device, 0, LEN), &filled, 1,
                  &copied));
    OK(gpurt_wait(copied));
    CHECK(all_bytes(host, LEN, 0x3C));

    OK(gpurt_host_unregister(registered));
    OK(gpurt_lookup(host, LEN, 0, &address));
    CHECK(address == NULL);
    OK(gpurt_stats(&after));
    CHECK(after.locked_ranges == before.locked_ranges);
    CHECK(after.registered_locks == before.registered_locks);
    CHECK(after.driver_unpins == before.driver_unpins + 1);
    EXPECT(GPURT_STATUS_NOT_LOCKED, gpurt_unlock(host));
    OK(gpurt_free(device));
    free(host);
}

static void lock_unlock_lookup(void) {
    enum { LEN = 8192 };
    unsigned char *host = malloc(LEN);
    void *address = (void *)1;
    OK(gpurt_lookup(host, 16, 0, &address));
    CHECK(address == NULL);
    OK(gpurt_lock(host, LEN));
    OK(gpurt_lookup(host + 100, 16, 1, &address));
    CHECK(address != NULL);
    OK(gpurt_lookup(host + LEN - 8, 16, 0, &address));
    CHECK(address == NULL); /* runs past the locked range */
    OK(gpurt_lock(host + 10, 10)); /* nested */
    EXPECT(GPURT_STATUS_OVERLAP, gpurt_lock(host + LEN - 1, 2));
    EXPECT(GPURT_STATUS_NULL_POINTER, gpurt_lock(NULL, 16));
    EXPECT(GPURT_STATUS_ZERO_SIZE, gpurt_lock(host, 0));
    EXPECT(GPURT_STATUS_NULL_POINTER, gpurt_lookup(host, 16, 0, NULL));
    OK(gpurt_unlock(host + 4000)); /* any byte of the range */
    OK(gpurt_unlock(host));
    EXPECT(GPURT_STATUS_NOT_LOCKED, gpurt_unlock(host));
    EXPECT(GPURT_STATUS_NULL_POINTER, gpurt_unlock(NULL));
    free(host);
}

static void tokens_fork_join_wait_and_misuse(void) {
    gpurt_memory_t m;
    gpurt_token_t start, branches[3], joined;
    OK(gpurt_alloc(0, GPURT_MEMORY_DEVICE, 3 * 256, &m));
    OK(gpurt_fill(0, gpurt_span_of(m, 0, 3 * 256), 0, NULL, 0, &start));
    EXPECT(GPURT_STATUS_ZERO_SIZE, gpurt_fork(start, 0, branches));
    EXPECT(GPURT_STATUS_NULL_POINTER, gpurt_fork(start, 3, NULL));
    /* Counts above the branches one fork may make: refused before anything is allocated (a
     * count of 2^40 aborted the process, SIZE_MAX panicked). */
    EXPECT(GPURT_STATUS_LIMIT_EXCEEDED, gpurt_fork(start, 65537, branches));
#if SIZE_MAX > 0xFFFFFFFFu
    EXPECT(GPURT_STATUS_LIMIT_EXCEEDED, gpurt_fork(start, (size_t)1 << 40, branches));
#endif
    CHECK(strstr(gpurt_last_error(), "fork branch count") != NULL);
    EXPECT(GPURT_STATUS_LIMIT_EXCEEDED, gpurt_fork(start, SIZE_MAX, branches));
    OK(gpurt_fork(start, 3, branches)); /* still valid after the refusals above */
    EXPECT(GPURT_STATUS_INVALID_HANDLE, gpurt_wait(start));
    gpurt_token_t filled[3];
    for (int i = 0; i < 3; i++)
        OK(gpurt_fill(0, gpurt_span_of(m, (size_t)i * 256, 256), (unsigned char)(i + 1),
                      &branches[i], 1, &filled[i]));
    gpurt_token_t twice[2] = {filled[0], filled[0]};
    EXPECT(GPURT_STATUS_INVALID_HANDLE, gpurt_join(twice, 2, &joined));
    EXPECT(GPURT_STATUS_ZERO_SIZE, gpurt_join(filled, 0, &joined));
    EXPECT(GPURT_STATUS_NULL_POINTER, gpurt_join(NULL, 3, &joined));
    OK(gpurt_join(filled, 3, &joined)); /* the refused joins left the tokens valid */
    EXPECT(GPURT_STATUS_INVALID_HANDLE, gpurt_join(filled, 3, &joined));
    unsigned char back[3 * 256];
    read_back(0, back, gpurt_span_of(m, 0, sizeof back), &joined, 1);
    CHECK(all_bytes(back, 256, 1) && all_bytes(back + 256, 256, 2) &&
          all_bytes(back + 512, 256, 3));
    gpurt_token_t null_token = {0}, made_up = {0x0123456789ABCDEFull};
    EXPECT(GPURT_STATUS_NULL_POINTER, gpurt_wait(null_token));
    EXPECT(GPURT_STATUS_INVALID_HANDLE, gpurt_wait(made_up));
    OK(gpurt_free(m));
}

/* Lengths and counts that no memory can hold are refused with a status, and the tokens of the
 * refused calls stay valid. (Before, the library made slices of such lengths, which is undefined
 * behaviour and aborts a debug build, or panicked allocating room for the fork's branches.) */
static void lengths_and_counts_beyond_memory_are_refused(void) {
    gpurt_memory_t m;
    gpurt_token_t start, t, branches[2];
    unsigned char host[64];
    gpurt_kernel_t fill;
    OK(gpurt_alloc(0, GPURT_MEMORY_DEVICE, 64, &m));
    OK(gpurt_kernel(0, "fill_u32", &fill));
    OK(gpurt_fill(0, gpurt_span_of(m, 0, 64), 1, NULL, 0, &start));
    EXPECT(GPURT_STATUS_OUT_OF_BOUNDS,
           gpurt_upload(0, gpurt_span_of(m, 0, SIZE_MAX), host, NULL, 0, &t));
    EXPECT(GPURT_STATUS_OUT_OF_BOUNDS,
           gpurt_download(0, host, gpurt_span_of(m, 8, SIZE_MAX - 4), NULL, 0));
    EXPECT(GPURT_STATUS_INVALID_ARGUMENT, gpurt_join(&start, SIZE_MAX, &t));
    EXPECT(GPURT_STATUS_INVALID_ARGUMENT,
           gpurt_fill(0, gpurt_span_of(m, 0, 64), 2, &start, SIZE_MAX / 4, &t));
    gpurt_arg_t args[3] = {gpurt_arg_span(gpurt_span_of(m, 0, 64)), gpurt_arg_u32(2),
                           gpurt_arg_u64(16)};
    EXPECT(GPURT_STATUS_INVALID_ARGUMENT,
           gpurt_launch(fill, &LINEAR, args, SIZE_MAX / 8, &start, 1, &t));
    EXPECT(GPURT_STATUS_LIMIT_EXCEEDED, gpurt_fork(start, SIZE_MAX, branches));
    EXPECT(GPURT_STATUS_LIMIT_EXCEEDED, gpurt_fork(start, SIZE_MAX / 16, branches));
    OK(gpurt_fork(start, 2, branches)); /* the refused calls left it valid */
    OK(gpurt_join(branches, 2, &t));
    memset(host, 0, sizeof host);
    read_back(0, host, gpurt_span_of(m, 0, 64), &t, 1);
    CHECK(all_bytes(host, sizeof host, 1));
    OK(gpurt_free(m));
}

/* Each thread allocates, fills, reads back and frees on its own device; failures are counted
 * per thread and each thread's last error is its own. */
static void *worker(void *arg) {
    uintptr_t index = (uintptr_t)arg;
    uint32_t device = (uint32_t)(index % 2);
    long wrong = 0;
    for (int round = 0; round < 50; round++) {
        gpurt_memory_t m;
        gpurt_token_t t;
        unsigned char value = (unsigned char)(index * 50 + (uintptr_t)round);
        unsigned char back[512];
        if (gpurt_alloc(device, GPURT_MEMORY_DEVICE, 512, &m) != GPURT_STATUS_OK ||
            gpurt_fill(device, gpurt_span_of(m, 0, 512), value, NULL, 0, &t) != GPURT_STATUS_OK ||
            gpurt_download(device, back, gpurt_span_of(m, 0, 512), &t, 1) != GPURT_STATUS_OK ||
            !all_bytes(back, 512, value) || gpurt_free(m) != GPURT_STATUS_OK)
            wrong++;
    }
    gpurt_memory_t null_memory = {0};
    if (gpurt_free(null_memory) != GPURT_STATUS_NULL_POINTER ||
        strstr(gpurt_last_error(), "memory handle") == NULL)
        wrong++;
    return (void *)wrong;
}

static void threads_share_the_runtime(void) {
    pthread_t threads[4];
    for (uintptr_t i = 0; i < 4; i++)
        CHECK(pthread_create(&threads[i], NULL, worker, (void *)i) == 0);
    for (int i = 0; i < 4; i++) {
        void *wrong = NULL;
        pthread_join(threads[i], &wrong);
        CHECK(wrong == NULL);
    }
}

static void statistics(void) {
    gpurt_memory_t m;
    OK(gpurt_alloc(0, GPURT_MEMORY_DEVICE, 777, &m));
    OK(gpurt_free(m));
    gpurt_stats_t before, after;
    OK(gpurt_stats(&before));
    OK(gpurt_alloc(0, GPURT_MEMORY_DEVICE, 777, &m));
    OK(gpurt_stats(&after));
    CHECK(after.allocation_hits == before.allocation_hits + 1);
    CHECK(after.segment_allocations == before.segment_allocations);
    CHECK(after.live_memory == before.live_memory + 1);
    CHECK(after.operations > 0 && after.stream_acquires >= after.streams_created);
    CHECK(after.live_kernels == 3);
    EXPECT(GPURT_STATUS_NULL_POINTER, gpurt_stats(NULL));
    /* Without growable segments nothing is mapped or reserved as address space. */
    gpurt_vm_stats_t vm;
    memset(&vm, 0xFF, sizeof vm);
    OK(gpurt_allocator_vm_stats(&vm));
    CHECK(vm.mapped_bytes == 0 && vm.address_space_bytes == 0 && vm.maps == 0);
    EXPECT(GPURT_STATUS_NULL_POINTER, gpurt_allocator_vm_stats(NULL));
    OK(gpurt_free(m));
}

/* A runtime opened with GPU_RUNTIME_GROWABLE_SEGMENTS=1: a buffer grows a segment, mapped
 * bytes follow it into gpurt_allocator_vm_stats while the address space stays reserved, and
 * gpurt_stats_t counts the mapped bytes as reserved. Runs on a runtime of its own (the
 * variable is read when the runtime opens), after the others have shut theirs down. */
static void growable_segments_report_mapped_bytes_and_address_space(void) {
    setenv("GPU_RUNTIME_GROWABLE_SEGMENTS", "1", 1);
    gpurt_memory_t small, large;
    OK(gpurt_alloc(0, GPURT_MEMORY_DEVICE, 3u << 20, &small));
    gpurt_vm_stats_t first, second;
    OK(gpurt_allocator_vm_stats(&first));
    CHECK(first.mapped_bytes >= (3u << 20) && first.maps >= 1);
    CHECK(first.address_space_bytes >= first.mapped_bytes);
    OK(gpurt_alloc(0, GPURT_MEMORY_DEVICE, 9u << 20, &large));
    OK(gpurt_allocator_vm_stats(&second));
    CHECK(second.mapped_bytes >= first.mapped_bytes + (9u << 20) - (2u << 20));
    CHECK(second.maps > first.maps);
    gpurt_stats_t stats;
    OK(gpurt_stats(&stats));
    CHECK(stats.reserved_bytes >= second.mapped_bytes);
    CHECK(stats.segment_allocations == 0);
    /* Freed memory stays mapped in the cache until the shutdown trims it. */
    OK(gpurt_free(small));
    OK(gpurt_free(large));
    gpurt_vm_stats_t freed;
    OK(gpurt_allocator_vm_stats(&freed));
    CHECK(freed.mapped_bytes == second.mapped_bytes);
    gpurt_report_t report;
    OK(gpurt_shutdown(&report));
    CHECK(report.trimmed_bytes >= second.mapped_bytes);
    unsetenv("GPU_RUNTIME_GROWABLE_SEGMENTS");
}

/* Leaves one buffer and one token behind: the shutdown releases and reports them, and writes
 * the trace. */
static void shutdown_reports_and_writes_the_trace(const char *trace_path) {
    gpurt_memory_t kept, fresh;
    gpurt_token_t unwaited;
    OK(gpurt_alloc(1, GPURT_MEMORY_DEVICE, 64, &kept));
    OK(gpurt_fill(1, gpurt_span_of(kept, 0, 64), 9, NULL, 0, &unwaited));
    gpurt_report_t report;
    memset(&report, 0xFF, sizeof report);
    OK(gpurt_shutdown(&report));
    CHECK(report.released_objects == 4); /* the buffer and the three kernels */
    CHECK(report.unwaited_tokens == 1);
    CHECK(report.trimmed_bytes > 0);
    CHECK(report.unpinned_ranges == 0);
    CHECK(report.trace_written == 1 && report.trace_calls > 0 && report.trace_defects == 0);
    EXPECT(GPURT_STATUS_NOT_OPEN, gpurt_shutdown(NULL));

    FILE *trace = fopen(trace_path, "r");
    CHECK(trace != NULL);
    if (trace) {
        char line[256];
        unsigned long lines = 0, creates = 0, destroys = 0;
        while (fgets(line, sizeof line, trace)) {
            lines++;
            creates += strncmp(line, "stream_create", 13) == 0;
            destroys += strncmp(line, "stream_destroy", 14) == 0;
        }
        fclose(trace);
        CHECK(lines == report.trace_calls);
        CHECK(creates > 0 && creates == destroys);
    }

    /* The next call opens a new runtime; the old handles and tokens stay invalid there. */
    EXPECT(GPURT_STATUS_INVALID_HANDLE, gpurt_free(kept));
    CHECK(strstr(gpurt_last_error(), "earlier session") != NULL);
    EXPECT(GPURT_STATUS_INVALID_HANDLE, gpurt_wait(unwaited));
    OK(gpurt_alloc(0, GPURT_MEMORY_DEVICE, 64, &fresh));
    CHECK(fresh.id != kept.id);
    OK(gpurt_free(fresh));
    OK(gpurt_shutdown(&report));
    CHECK(report.released_objects == 0 && report.unwaited_tokens == 0);
}

/* The buffer's first `len` bytes all equal `value` (after the work of `after`, consumed). */
static int holds(gpurt_memory_t memory, size_t len, unsigned char value, gpurt_token_t *after,
                 size_t n) {
    static unsigned char back[8192];
    if (len > sizeof back)
        return 0;
    memset(back, (unsigned char)~value, len);
    read_back(0, back, gpurt_span_of(memory, 0, len), after, n);
    return all_bytes(back, len, value);
}

/* A launch whose count reaches past its span, on its own (no earlier failure on any stream):
 * refused at launch, before anything is queued, and the neighbouring buffer keeps its bytes.
 * fill_u32 of 2,048 words on a 4 KiB buffer returned OK and overwrote the buffer after it. */
static void a_launch_past_its_span_is_refused_on_its_own(void) {
    gpurt_kernel_t fill;
    gpurt_memory_t words, neighbour;
    gpurt_token_t t, filled;
    OK(gpurt_kernel(0, "fill_u32", &fill));
    OK(gpurt_alloc(0, GPURT_MEMORY_DEVICE, 4096, &words));
    OK(gpurt_alloc(0, GPURT_MEMORY_DEVICE, 4096, &neighbour));
    OK(gpurt_fill(0, gpurt_span_of(neighbour, 0, 4096), 0x11, NULL, 0, &filled));
    gpurt_arg_t past_end[3] = {gpurt_arg_span(gpurt_span_of(words, 0, 16)), gpurt_arg_u32(1),
                               gpurt_arg_u64(1000)};
    EXPECT(GPURT_STATUS_KERNEL_ARGUMENTS, gpurt_launch(fill, &LINEAR, past_end, 3, NULL, 0, &t));
    CHECK(strstr(gpurt_last_error(), "argument 0 (dst)") != NULL);
    CHECK(strstr(gpurt_last_error(), "3984 bytes past") != NULL);
    gpurt_arg_t two_k[3] = {gpurt_arg_span(gpurt_span_of(words, 0, 4096)),
                            gpurt_arg_u32(0xDEADBEEF), gpurt_arg_u64(2048)};
    EXPECT(GPURT_STATUS_KERNEL_ARGUMENTS, gpurt_launch(fill, &LINEAR, two_k, 3, &filled, 1, &t));
    CHECK(strstr(gpurt_last_error(), "4096 bytes past") != NULL);
    CHECK(holds(neighbour, 4096, 0x11, &filled, 1)); /* the refusal left `filled` valid */
    two_k[1] = gpurt_arg_u32(0x22222222);
    two_k[2] = gpurt_arg_u64(1024);
    OK(gpurt_launch(fill, &LINEAR, two_k, 3, NULL, 0, &t));
    CHECK(holds(words, 4096, 0x22, &t, 1));
    CHECK(holds(neighbour, 4096, 0x11, NULL, 0));
    OK(gpurt_free(words));
    OK(gpurt_free(neighbour));
}

/* Wrong arguments and launch shapes no device runs: each refused at launch with a status and
 * a message that say what was wrong (they were OK at launch and `DRIVER: HOST_INVALID_VALUE`
 * at the wait, or that code at launch for every shape). The stream and device stay usable, so
 * the runtime shuts down cleanly after. */
static void wrong_arguments_and_shapes_are_refused_at_launch(void) {
    enum { N = 1000 };
    gpurt_kernel_t fill;
    gpurt_memory_t words;
    gpurt_token_t t;
    OK(gpurt_kernel(0, "fill_u32", &fill));
    OK(gpurt_alloc(0, GPURT_MEMORY_DEVICE, N * 4, &words));
    gpurt_arg_t fill_y[3] = {gpurt_arg_span(gpurt_span_of(words, 0, N * 4)), gpurt_arg_u32(7),
                             gpurt_arg_u64(N)};
    EXPECT(GPURT_STATUS_KERNEL_ARGUMENTS, gpurt_launch(fill, &LINEAR, fill_y, 2, NULL, 0, &t));
    CHECK(strstr(gpurt_last_error(), "(Ptr dst, U32 value, U64 count)") != NULL);
    gpurt_arg_t wrong_kind[3] = {fill_y[0], gpurt_arg_u64(7), fill_y[2]};
    EXPECT(GPURT_STATUS_KERNEL_ARGUMENTS,
           gpurt_launch(fill, &LINEAR, wrong_kind, 3, NULL, 0, &t));
    gpurt_dims_t no_grid = {{0, 1, 1}, {64, 1, 1}, 0};
    EXPECT(GPURT_STATUS_INVALID_ARGUMENT, gpurt_launch(fill, &no_grid, fill_y, 3, NULL, 0, &t));
    CHECK(strstr(gpurt_last_error(), "grid x is 0") != NULL);
    gpurt_dims_t wide = {{1, 1, 1}, {4096, 1, 1}, 0};
    EXPECT(GPURT_STATUS_INVALID_ARGUMENT, gpurt_launch(fill, &wide, fill_y, 3, NULL, 0, &t));
    CHECK(strstr(gpurt_last_error(), "threads per workgroup is 4096") != NULL);
    OK(gpurt_launch(fill, &LINEAR, fill_y, 3, NULL, 0, &t));
    OK(gpurt_wait(t));
    OK(gpurt_free(words));
    gpurt_report_t report;
    memset(&report, 0xFF, sizeof report);
    OK(gpurt_shutdown(&report));
    CHECK(report.unwaited_tokens == 0);
    CHECK(report.trace_written == 1 && report.trace_calls > 0);
    EXPECT(GPURT_STATUS_NOT_OPEN, gpurt_shutdown(NULL));
}

/* A graph recorded once and replayed: fill x, then y = 2x + y after a fill of y, then a copy of
 * y into z; replays after tokens, updated nodes, and misuse refused. */
static void graphs_record_replay_and_update(void) {
    enum { N = 256 };
    gpurt_kernel_t axpy, fill;
    OK(gpurt_kernel(0, "axpy_f32", &axpy));
    OK(gpurt_kernel(0, "fill_u32", &fill));
    gpurt_memory_t x, y, z;
    OK(gpurt_alloc(0, GPURT_MEMORY_DEVICE, N * 4, &x));
    OK(gpurt_alloc(0, GPURT_MEMORY_DEVICE, N * 4, &y));
    OK(gpurt_alloc(0, GPURT_MEMORY_DEVICE, N * 4, &z));
    gpurt_span_t xs = gpurt_span_of(x, 0, N * 4), ys = gpurt_span_of(y, 0, N * 4),
                 zs = gpurt_span_of(z, 0, N * 4);
    float three = 3.0f;
    uint32_t bits;
    memcpy(&bits, &three, 4);
    gpurt_graph_t graph;
    uint32_t fill_x, fill_y, saxpy, copy, bad;
    OK(gpurt_graph_begin(0, &graph));
    gpurt_arg_t fill_args[3] = {gpurt_arg_span(xs), gpurt_arg_u32(bits), gpurt_arg_u64(N)};
    OK(gpurt_graph_kernel(graph, fill, &LINEAR, fill_args, 3, NULL, 0, &fill_x));
    OK(gpurt_graph_fill(graph, ys, 0, NULL, 0, &fill_y));
    uint32_t inputs[2] = {fill_x, fill_y};
    gpurt_arg_t axpy_args[4] = {gpurt_arg_f32(2.0f), gpurt_arg_span(xs), gpurt_arg_span(ys),
                                gpurt_arg_u64(N)};
    OK(gpurt_graph_kernel(graph, axpy, &LINEAR, axpy_args, 4, inputs, 2, &saxpy));
    OK(gpurt_graph_copy(graph, zs, ys, &saxpy, 1, &copy));
    CHECK(fill_x == 0 && fill_y == 1 && saxpy == 2 && copy == 3);
    uint32_t unknown = 9;
    EXPECT(GPURT_STATUS_INVALID_ARGUMENT, gpurt_graph_fill(graph, zs, 0, &unknown, 1, &bad));
    EXPECT(GPURT_STATUS_OVERLAP, gpurt_graph_copy(graph, gpurt_span_of(z, 0, 64),
                                                  gpurt_span_of(z, 32, 64), NULL, 0, &bad));
    gpurt_token_t t;
    EXPECT(GPURT_STATUS_INVALID_ARGUMENT, gpurt_graph_launch(graph, NULL, 0, &t));
    OK(gpurt_graph_end(graph));
    EXPECT(GPURT_STATUS_INVALID_ARGUMENT, gpurt_graph_fill(graph, zs, 0, NULL, 0, &bad));

    float zs_back[N];
    gpurt_token_t done;
    for (int round = 0; round < 3; round++) {
        OK(gpurt_graph_launch(graph, NULL, 0, &done));
        read_back(0, zs_back, zs, &done, 1);
        int all_right = 1;
        for (int i = 0; i < N; i++)
            all_right &= zs_back[i] == 6.0f;
        CHECK(all_right);
    }
    /* y starts at 1.0 from now on: y = 2 * 3 + 1 */
    float one = 1.0f;
    memcpy(&bits, &one, 4);
    gpurt_arg_t fill_y_args[3] = {gpurt_arg_span(ys), gpurt_arg_u32(bits), gpurt_arg_u64(N)};
    EXPECT(GPURT_STATUS_INVALID_ARGUMENT,
           gpurt_graph_update_kernel(graph, fill_y, fill, &LINEAR, fill_y_args, 3));
    OK(gpurt_graph_update_fill(graph, fill_y, ys, 0));
    gpurt_arg_t fill_x_args[3] = {gpurt_arg_span(xs), gpurt_arg_u32(bits), gpurt_arg_u64(N)};
    OK(gpurt_graph_update_kernel(graph, fill_x, fill, &LINEAR, fill_x_args, 3));
    OK(gpurt_graph_launch(graph, NULL, 0, &done));
    read_back(0, zs_back, zs, &done, 1);
    CHECK(zs_back[0] == 2.0f && zs_back[N - 1] == 2.0f); /* y = 2 * 1 + 0 */
    EXPECT(GPURT_STATUS_INVALID_ARGUMENT, gpurt_graph_update_copy(graph, 7, zs, ys));

    /* Memory freed while the graph holds it stays until the graph is destroyed. */
    OK(gpurt_free(z));
    OK(gpurt_graph_launch(graph, NULL, 0, &done));
    OK(gpurt_wait(done));
    OK(gpurt_graph_destroy(graph));
    EXPECT(GPURT_STATUS_INVALID_HANDLE, gpurt_graph_launch(graph, NULL, 0, &t));
    EXPECT(GPURT_STATUS_INVALID_HANDLE, gpurt_graph_destroy(graph));
    EXPECT(GPURT_STATUS_NULL_POINTER, gpurt_graph_begin(0, NULL));
    EXPECT(GPURT_STATUS_UNKNOWN_DEVICE, gpurt_graph_begin(9, &graph));
    OK(gpurt_free(x));
    OK(gpurt_free(y));
}

/* A graph with memory of its own: z = 2x + 1 through two scratch blocks, replayed after new
 * inputs; the blocks' handles are the graph's alone, and misuse is refused. */
static void graphs_own_memory(void) {
    enum { N = 256 };
    gpurt_kernel_t axpy, fill;
    OK(gpurt_kernel(0, "axpy_f32", &axpy));
    OK(gpurt_kernel(0, "fill_u32", &fill));
    gpurt_memory_t x, z;
    OK(gpurt_alloc(0, GPURT_MEMORY_DEVICE, N * 4, &x));
    OK(gpurt_alloc(0, GPURT_MEMORY_DEVICE, N * 4, &z));
    gpurt_span_t xs = gpurt_span_of(x, 0, N * 4), zs = gpurt_span_of(z, 0, N * 4);
    gpurt_graph_t graph, other;
    gpurt_memory_t a, b, foreign;
    OK(gpurt_graph_begin(0, &graph));
    OK(gpurt_graph_begin(0, &other));
    EXPECT(GPURT_STATUS_ZERO_SIZE, gpurt_graph_alloc(graph, 0, &a));
    EXPECT(GPURT_STATUS_NULL_POINTER, gpurt_graph_alloc(graph, 64, NULL));
    OK(gpurt_graph_alloc(graph, N * 4, &a));
    OK(gpurt_graph_alloc(graph, N * 4, &b));
    OK(gpurt_graph_alloc(other, N * 4, &foreign));
    gpurt_span_t as = gpurt_span_of(a, 0, N * 4), bs = gpurt_span_of(b, 0, N * 4);
    float one = 1.0f;
    uint32_t bits, staged, ones, saxpy, out, bad;
    memcpy(&bits, &one, 4);
    OK(gpurt_graph_copy(graph, as, xs, NULL, 0, &staged));
    gpurt_arg_t fill_args[3] = {gpurt_arg_span(bs), gpurt_arg_u32(bits), gpurt_arg_u64(N)};
    OK(gpurt_graph_kernel(graph, fill, &LINEAR, fill_args, 3, NULL, 0, &ones));
    uint32_t inputs[2] = {staged, ones};
    gpurt_arg_t axpy_args[4] = {gpurt_arg_f32(2.0f), gpurt_arg_span(as), gpurt_arg_span(bs),
                                gpurt_arg_u64(N)};
    OK(gpurt_graph_kernel(graph, axpy, &LINEAR, axpy_args, 4, inputs, 2, &saxpy));
    OK(gpurt_graph_copy(graph, zs, bs, &saxpy, 1, &out));
    /* Another graph's block, a span past a block's end, a block outside graphs: refused. */
    EXPECT(GPURT_STATUS_INVALID_ARGUMENT,
           gpurt_graph_fill(graph, gpurt_span_of(foreign, 0, 64), 0, NULL, 0, &bad));
    EXPECT(GPURT_STATUS_OUT_OF_BOUNDS,
           gpurt_graph_fill(graph, gpurt_span_of(a, N * 4 - 8, 16), 0, NULL, 0, &bad));
    EXPECT(GPURT_STATUS_INVALID_HANDLE, gpurt_free(a));
    gpurt_token_t t;
    EXPECT(GPURT_STATUS_INVALID_HANDLE, gpurt_fill(0, as, 0, NULL, 0, &t));
    OK(gpurt_graph_end(graph));
    gpurt_memory_t late;
    EXPECT(GPURT_STATUS_INVALID_ARGUMENT, gpurt_graph_alloc(graph, 64, &late));

    float input[N], back[N];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++)
            input[i] = (float)(i + round);
        gpurt_token_t uploaded, done;
        OK(gpurt_upload(0, xs, input, NULL, 0, &uploaded));
        OK(gpurt_graph_launch(graph, &uploaded, 1, &done));
        read_back(0, back, zs, &done, 1);
        int all_right = 1;
        for (int i = 0; i < N; i++)
            all_right &= back[i] == 2.0f * (float)(i + round) + 1.0f;
        CHECK(all_right);
    }
    OK(gpurt_graph_destroy(graph));
    /* The blocks' handles went with their graph. */
    EXPECT(GPURT_STATUS_INVALID_HANDLE,
           gpurt_graph_fill(other, gpurt_span_of(a, 0, 64), 0, NULL, 0, &bad));
    OK(gpurt_graph_destroy(other));
    OK(gpurt_free(x));
    OK(gpurt_free(z));
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s TRACE_FILE\n", argv[0]);
        return 2;
    }
    setenv("GPU_RUNTIME_BACKEND", "host", 1);
    setenv("GPU_RUNTIME_TRACE", argv[1], 1);
    open_and_status_names();
    device_memory_fill_copy_and_bad_spans();
    stream_ordered_allocation_upload_and_download();
    pinned_and_managed_memory_are_reached_from_the_host();
    a_launch_past_its_span_is_refused_on_its_own();
    kernels_by_handle();
    workgroup_memory_above_the_default_limit();
    graphs_record_replay_and_update();
    graphs_own_memory();
    registered_memory_nests_and_carries_transfers();
    a_registration_is_kept_from_raw_unlocks();
    lock_unlock_lookup();
    tokens_fork_join_wait_and_misuse();
    lengths_and_counts_beyond_memory_are_refused();
    threads_share_the_runtime();
    statistics();
    shutdown_reports_and_writes_the_trace(argv[1]);
    wrong_arguments_and_shapes_are_refused_at_launch();
    growable_segments_report_mapped_bytes_and_address_space();
    printf("%d checks, %d failed\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
