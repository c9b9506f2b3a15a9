// A stand-in for libhsa-runtime64 that runs on the CPU, for gpu-hsa-ffi/tests/hsa_fake.rs: one
// CPU agent and two GPU agents whose "device memory" is host memory, signals as atomic
// counters, queues whose packet processor is a thread (barrier-AND and kernel-dispatch
// packets, the standard kernels run in C), and DMA copies as threads that wait for their
// dependency signals. It follows the HSA semantics the backend relies on (barrier-AND waits
// for every dependency to read 0, completion signals are decremented, a packet is taken once
// its header is no longer INVALID), and counts what is alive so the test can check for leaks.
// It is stricter than a GPU where that finds bugs: a destroyed signal is poisoned (and its
// memory never reused), and any later use of it aborts; a dispatch whose kernarg buffer is no
// longer allocated aborts; hsa_amd_agents_allow_access refuses an agent that may never reach the
// pool, and fake_hsa_set_peer_link(0) takes the link between the GPUs away (each GPU's device
// pool then NEVER_ALLOWED to the other). With FAKE_HSA_JITTER=1 in the environment, copies and packets are
// also delayed at random, so that work not ordered by a signal does not happen to run in order
// (off by default: it also changes how many calls the runtime makes, which the conformance
// suite's failure sweep counts on; see the README).
// Written from the HSA specification for this test; no HSA header or runtime code is used.

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef uint32_t status_t;
typedef struct { uint64_t handle; } handle_t;

enum {
    SUCCESS = 0,
    ERROR = 0x1000,
    INVALID_ARGUMENT = 0x1001,
    INVALID_AGENT = 0x1004,
    NOT_INITIALIZED = 0x100b,
    INVALID_CODE_OBJECT = 0x1010,
    INVALID_SYMBOL_NAME = 0x1013,
};

// Agents: the CPU is 1, the GPUs 2 and 3. Agent a's pools are 10a (CPU: fine-grained; GPU:
// coarse-grained) and 10a + 1 (CPU: kernarg; GPU: group memory).
enum { CPU_AGENT = 1, FIRST_GPU = 2, LAST_GPU = 3 };
enum { LDS_BYTES = 65536 };
enum { PACKET_INVALID = 1, PACKET_DISPATCH = 2, PACKET_BARRIER_AND = 3 };
enum { KERNEL_FILL = 1001, KERNEL_AXPY = 1002, KERNEL_REVERSE = 1003 };

static atomic_int initialised;

// Whether the GPUs are linked (each may reach the other's device pool); on by default.
static atomic_int peer_link = 1;

// Links (1) or unlinks (0) the GPUs, for the agent-pool access answers from now on.
void fake_hsa_set_peer_link(int linked) { peer_link = linked; }

// ----- what is alive (for the leak check) -----
static atomic_long live_signals, live_queues, live_allocations, live_locks, live_executables,
    live_readers;

// Signals, queues, allocations, locks, executables and readers still alive.
long fake_hsa_live(void) {
    return live_signals + live_queues + live_allocations + live_locks + live_executables +
           live_readers;
}

#define REQUIRE_INIT()                 \
    do {                               \
        if (initialised <= 0)          \
            return NOT_INITIALIZED;    \
    } while (0)

// Stops the process with a message (a rule of HSA the backend broke).
static void broken(const char *rule) {
    fprintf(stderr, "fake HSA: %s\n", rule);
    abort();
}

// Sleeps 0 to 200 microseconds, at random (thread-safe), with FAKE_HSA_JITTER=1.
static void jitter(void) {
    static atomic_int enabled = -1;
    if (enabled < 0) {
        const char *setting = getenv("FAKE_HSA_JITTER");
        enabled = setting && strcmp(setting, "1") == 0;
    }
    if (!enabled)
        return;
    static atomic_uint next_seed = 1;
    unsigned seed = atomic_fetch_add(&next_seed, 1) * 2654435761u;
    usleep(rand_r(&seed) % 200);
}

static int is_gpu(handle_t agent) {
    return agent.handle >= FIRST_GPU && agent.handle <= LAST_GPU;
}

static int is_agent(handle_t agent) { return agent.handle == CPU_AGENT || is_gpu(agent); }

status_t hsa_init(void) {
    initialised++;
    return SUCCESS;
}

status_t hsa_shut_down(void) {
    REQUIRE_INIT();
    initialised--;
    return SUCCESS;
}

status_t hsa_status_string(status_t status, const char **text) {
    (void)status;
    *text = "fake HSA status";
    return SUCCESS;
}

status_t hsa_system_get_info(uint32_t attribute, void *value) {
    (void)attribute;
    (void)value;
    REQUIRE_INIT();
    return SUCCESS;
}

status_t hsa_iterate_agents(status_t (*callback)(handle_t, void *), void *data) {
    REQUIRE_INIT();
    for (uint64_t agent = CPU_AGENT; agent <= LAST_GPU; agent++) {
        status_t status = callback((handle_t){agent}, data);
        if (status != SUCCESS)
            return status;
    }
    return SUCCESS;
}

status_t hsa_agent_get_info(handle_t agent, uint32_t attribute, void *value) {
    REQUIRE_INIT();
    if (!is_agent(agent))
        return INVALID_AGENT;
    switch (attribute) {
    case 0: // NAME: char[64]
        memset(value, 0, 64);
        strcpy(value, is_gpu(agent) ? "fake-gfx90a" : "fake-cpu");
        return SUCCESS;
    case 14: // QUEUE_MAX_SIZE
        *(uint32_t *)value = 256;
        return SUCCESS;
    case 17: // DEVICE: CPU 0, GPU 1
        *(uint32_t *)value = is_gpu(agent) ? 1 : 0;
        return SUCCESS;
    default:
        return INVALID_ARGUMENT;
    }
}

status_t hsa_amd_agent_iterate_memory_pools(handle_t agent, status_t (*callback)(handle_t, void *),
                                            void *data) {
    REQUIRE_INIT();
    if (!is_agent(agent))
        return INVALID_AGENT;
    for (uint64_t pool = agent.handle * 10; pool < agent.handle * 10 + 2; pool++) {
        status_t status = callback((handle_t){pool}, data);
        if (status != SUCCESS)
            return status;
    }
    return SUCCESS;
}

// The agent a pool belongs to.
static handle_t pool_agent(handle_t pool) { return (handle_t){pool.handle / 10}; }

status_t hsa_amd_memory_pool_get_info(handle_t pool, uint32_t attribute, void *value) {
    REQUIRE_INIT();
    int gpu = is_gpu(pool_agent(pool));
    int second = pool.handle % 10 == 1;
    int group = gpu && second;
    switch (attribute) {
    case 0: // SEGMENT: global 0, group 3
        *(uint32_t *)value = group ? 3 : 0;
        return SUCCESS;
    case 1: // GLOBAL_FLAGS: kernarg 1, fine 2, coarse 4
        *(uint32_t *)value = gpu ? 4 : second ? 3 : 2;
        return SUCCESS;
    case 2: // SIZE
        *(size_t *)value = group ? LDS_BYTES : (size_t)1 << 30;
        return SUCCESS;
    case 5: // RUNTIME_ALLOC_ALLOWED
        *(_Bool *)value = !group;
        return SUCCESS;
    default:
        return INVALID_ARGUMENT;
    }
}

// HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS of `pool` for `agent`, as ROCr answers it: its own
// agent's pool ALLOWED_BY_DEFAULT (1); another agent and a group pool NEVER_ALLOWED (0); another
// agent and a global pool DISALLOWED_BY_DEFAULT (2: hsa_amd_agents_allow_access opens each
// buffer), except a GPU's device pool for the other GPU without the peer link (0).
static uint32_t pool_access(handle_t agent, handle_t pool) {
    handle_t owner = pool_agent(pool);
    if (owner.handle == agent.handle)
        return 1;
    if (is_gpu(owner) && pool.handle % 10 == 1)
        return 0;
    if (is_gpu(owner) && is_gpu(agent) && !peer_link)
        return 0;
    return 2;
}

status_t hsa_amd_agent_memory_pool_get_info(handle_t agent, handle_t pool, uint32_t attribute,
                                            void *value) {
    REQUIRE_INIT();
    if (!is_agent(agent))
        return INVALID_AGENT;
    if (!is_agent(pool_agent(pool)) || pool.handle % 10 > 1)
        return INVALID_ARGUMENT;
    switch (attribute) {
    case 0: // ACCESS: hsa_amd_memory_pool_access_t
        *(uint32_t *)value = pool_access(agent, pool);
        return SUCCESS;
    case 1: // NUM_LINK_HOPS: none to its own pool or one it may never reach, else one
        *(uint32_t *)value = pool_agent(pool).handle != agent.handle && pool_access(agent, pool);
        return SUCCESS;
    default:
        return INVALID_ARGUMENT;
    }
}

// ----- memory: pool allocations and locked ranges, in one table -----
typedef struct Range {
    uintptr_t start;
    size_t len;
    uint64_t owner;  // the agent of the pool, or 0 for a locked host range
    struct Range *next;
} Range;

static Range *ranges;
static pthread_mutex_t ranges_lock = PTHREAD_MUTEX_INITIALIZER;

static void add_range(uintptr_t start, size_t len, uint64_t owner) {
    Range *range = malloc(sizeof *range);
    *range = (Range){start, len, owner, NULL};
    pthread_mutex_lock(&ranges_lock);
    range->next = ranges;
    ranges = range;
    pthread_mutex_unlock(&ranges_lock);
}

// Removes the range starting exactly at `start` of the kind (`locked`); 1 if there was one.
static int remove_range(uintptr_t start, int locked) {
    int found = 0;
    pthread_mutex_lock(&ranges_lock);
    for (Range **at = &ranges; *at; at = &(*at)->next) {
        if ((*at)->start == start && ((*at)->owner == 0) == locked) {
            Range *gone = *at;
            *at = gone->next;
            free(gone);
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&ranges_lock);
    return found;
}

status_t hsa_amd_memory_pool_allocate(handle_t pool, size_t size, uint32_t flags, void **ptr) {
    (void)flags;
    REQUIRE_INIT();
    handle_t agent = pool_agent(pool);
    if (size == 0 || !is_agent(agent) || (is_gpu(agent) && pool.handle % 10 == 1))
        return INVALID_ARGUMENT;
    if (size > ((size_t)1 << 30))
        return 0x1008; // OUT_OF_RESOURCES
    void *memory = aligned_alloc(4096, (size + 4095) / 4096 * 4096);
    if (!memory)
        return 0x1008;
    add_range((uintptr_t)memory, size, agent.handle);
    live_allocations++;
    *ptr = memory;
    return SUCCESS;
}

status_t hsa_amd_memory_pool_free(void *ptr) {
    REQUIRE_INIT();
    if (!remove_range((uintptr_t)ptr, 0))
        return INVALID_ARGUMENT;
    free(ptr);
    live_allocations--;
    return SUCCESS;
}

// The agent owning the pool memory `ptr` lies in, or 0 for memory no pool allocated.
static uint64_t allocation_owner(const void *ptr) {
    uint64_t owner = 0;
    pthread_mutex_lock(&ranges_lock);
    for (Range *range = ranges; range; range = range->next)
        if (range->owner && (uintptr_t)ptr >= range->start &&
            (uintptr_t)ptr - range->start < range->len)
            owner = range->owner;
    pthread_mutex_unlock(&ranges_lock);
    return owner;
}

status_t hsa_amd_agents_allow_access(uint32_t count, const handle_t *agents, const uint32_t *flags,
                                     const void *ptr) {
    REQUIRE_INIT();
    uint64_t owner = allocation_owner(ptr);
    if (count == 0 || !agents || flags || !owner)
        return INVALID_ARGUMENT;
    for (uint32_t i = 0; i < count; i++) {
        if (!is_agent(agents[i]))
            return INVALID_AGENT;
        // Pool allocations come from each agent's first pool (the kernarg pool's memory is the
        // CPU's too, with the same access).
        if (pool_access(agents[i], (handle_t){owner * 10}) == 0)
            return INVALID_ARGUMENT; // an inaccessible pool, as hsa_ext_amd.h says
    }
    return SUCCESS;
}

status_t hsa_amd_memory_lock(void *host, size_t size, handle_t *agents, int count, void **agent_ptr) {
    REQUIRE_INIT();
    for (int i = 0; i < count; i++)
        if (!is_agent(agents[i]))
            return INVALID_AGENT;
    if (!host || size == 0)
        return INVALID_ARGUMENT;
    add_range((uintptr_t)host, size, 0);
    live_locks++;
    *agent_ptr = host; // locked in place
    return SUCCESS;
}

status_t hsa_amd_memory_unlock(void *host) {
    REQUIRE_INIT();
    if (!remove_range((uintptr_t)host, 1))
        return INVALID_ARGUMENT;
    live_locks--;
    return SUCCESS;
}

typedef struct {
    uint32_t size;
    uint32_t type;
    void *agent_base;
    void *host_base;
    size_t bytes;
    void *user_data;
    handle_t owner;
    uint32_t global_flags;
} PointerInfo;

status_t hsa_amd_pointer_info(const void *ptr, PointerInfo *info, void *(*alloc)(size_t),
                              uint32_t *count, handle_t **accessible) {
    (void)alloc;
    (void)count;
    (void)accessible;
    REQUIRE_INIT();
    uintptr_t address = (uintptr_t)ptr;
    uint32_t size = info->size;
    memset(info, 0, sizeof *info);
    info->size = size;
    pthread_mutex_lock(&ranges_lock);
    for (Range *range = ranges; range; range = range->next) {
        if (address >= range->start && address - range->start < range->len) {
            info->type = range->owner ? 1 : 2; // HSA, LOCKED
            info->agent_base = (void *)range->start;
            info->host_base = range->owner >= FIRST_GPU ? NULL : (void *)range->start;
            info->bytes = range->len;
            info->owner = (handle_t){range->owner ? range->owner : CPU_AGENT};
            break;
        }
    }
    pthread_mutex_unlock(&ranges_lock);
    return SUCCESS;
}

// ----- signals -----
typedef struct {
    _Atomic int64_t value;
    atomic_int destroyed;
} Signal;

static _Atomic int64_t *value_of(handle_t signal) {
    Signal *live = (Signal *)(uintptr_t)signal.handle;
    if (atomic_load(&live->destroyed))
        broken("a signal was used after hsa_signal_destroy");
    return &live->value;
}

status_t hsa_signal_create(int64_t initial, uint32_t consumers, const handle_t *agents,
                           handle_t *signal) {
    (void)consumers;
    (void)agents;
    REQUIRE_INIT();
    Signal *created = malloc(sizeof *created);
    atomic_init(&created->value, initial);
    atomic_init(&created->destroyed, 0);
    live_signals++;
    signal->handle = (uintptr_t)created;
    return SUCCESS;
}

status_t hsa_signal_destroy(handle_t signal) {
    REQUIRE_INIT();
    if (!signal.handle)
        return INVALID_ARGUMENT;
    // Poisoned, never freed: a use after this aborts instead of reading reused memory.
    value_of(signal);
    atomic_store(&((Signal *)(uintptr_t)signal.handle)->destroyed, 1);
    live_signals--;
    return SUCCESS;
}

int64_t hsa_signal_load_scacquire(handle_t signal) { return atomic_load(value_of(signal)); }

void hsa_signal_store_screlease(handle_t signal, int64_t value) {
    atomic_store(value_of(signal), value);
}

void hsa_signal_add_screlease(handle_t signal, int64_t value) {
    atomic_fetch_add(value_of(signal), value);
}

static int holds(int64_t value, uint32_t condition, int64_t compare) {
    switch (condition) {
    case 0: return value == compare;
    case 1: return value != compare;
    case 2: return value < compare;
    default: return value >= compare;
    }
}

int64_t hsa_signal_wait_scacquire(handle_t signal, uint32_t condition, int64_t compare,
                                  uint64_t timeout, uint32_t wait_state) {
    (void)timeout;
    (void)wait_state;
    int64_t value;
    while (!holds(value = atomic_load(value_of(signal)), condition, compare))
        sched_yield();
    return value;
}

static void wait_zero(handle_t signal) {
    if (signal.handle)
        while (atomic_load(value_of(signal)) != 0)
            sched_yield();
}

static void complete(handle_t signal) {
    if (signal.handle)
        atomic_fetch_sub(value_of(signal), 1);
}

// ----- the standard kernels, on the CPU -----
typedef struct {
    uint16_t header, setup, wg_x, wg_y, wg_z, reserved0;
    uint32_t grid_x, grid_y, grid_z, private_size, group_size;
    uint64_t kernel_object;
    void *kernarg;
    uint64_t reserved2;
    handle_t completion;
} Dispatch;

typedef struct {
    uint16_t header, reserved0;
    uint32_t reserved1;
    handle_t deps[5];
    uint64_t reserved2;
    handle_t completion;
} BarrierAnd;

// Whether `address` lies in live pool memory.
static int allocated(const void *address) { return allocation_owner(address) != 0; }

static void run_kernel(const Dispatch *packet) {
    const uint8_t *args = packet->kernarg;
    if (!allocated(args))
        broken("a dispatch's kernarg buffer was freed before the dispatch ran");
    if (packet->kernel_object == KERNEL_FILL) {
        uint32_t *dst = *(uint32_t *const *)args;
        uint32_t value = *(const uint32_t *)(args + 8);
        uint64_t count = *(const uint64_t *)(args + 16);
        for (uint64_t i = 0; i < count; i++)
            dst[i] = value;
    } else if (packet->kernel_object == KERNEL_AXPY) {
        float a = *(const float *)args;
        const float *x = *(const float *const *)(args + 8);
        float *y = *(float *const *)(args + 16);
        uint64_t count = *(const uint64_t *)(args + 24);
        for (uint64_t i = 0; i < count; i++)
            y[i] = a * x[i] + y[i];
    } else if (packet->kernel_object == KERNEL_REVERSE) {
        uint32_t *data = *(uint32_t *const *)args;
        uint32_t words = *(const uint32_t *)(args + 8);
        // The launch's workgroup memory must hold a group's words, as on a GPU.
        if ((uint64_t)words * 4 > packet->group_size || packet->group_size > LDS_BYTES)
            broken("workgroup_reverse_u32 launched without room for its words");
        uint32_t *group_memory = malloc((size_t)words * 4 + 4);
        for (uint32_t g = 0; g < packet->grid_x / packet->wg_x; g++) {
            uint32_t *group = data + (uint64_t)g * words;
            memcpy(group_memory, group, (size_t)words * 4);
            for (uint32_t i = 0; i < words; i++)
                group[i] = group_memory[words - 1 - i] + 1;
        }
        free(group_memory);
    } else {
        broken("a dispatch of an unknown kernel object");
    }
}

// ----- queues -----
typedef struct {
    uint32_t type, features;
    void *base;
    handle_t doorbell;
    uint32_t size, reserved1;
    uint64_t id;
} PublicQueue;

typedef struct {
    PublicQueue public;  // first: the backend holds a pointer to it
    _Atomic uint64_t write, read;
    atomic_int stop;
    pthread_t processor;
} Queue;

static void *process(void *data) {
    Queue *queue = data;
    for (;;) {
        uint64_t index = atomic_load(&queue->read);
        uint8_t *slot = (uint8_t *)queue->public.base + (index % queue->public.size) * 64;
        _Atomic uint16_t *header = (_Atomic uint16_t *)slot;
        if (index >= atomic_load(&queue->write) || (atomic_load(header) & 0xff) == PACKET_INVALID) {
            if (atomic_load(&queue->stop))
                return NULL;
            sched_yield();
            continue;
        }
        jitter();
        uint8_t type = atomic_load(header) & 0xff;
        if (type == PACKET_BARRIER_AND) {
            BarrierAnd *packet = (BarrierAnd *)slot;
            for (int i = 0; i < 5; i++)
                wait_zero(packet->deps[i]);
            complete(packet->completion);
        } else if (type == PACKET_DISPATCH) {
            Dispatch *packet = (Dispatch *)slot;
            run_kernel(packet);
            complete(packet->completion);
        } else {
            broken("a packet of an unknown type");
        }
        atomic_store(header, PACKET_INVALID);
        atomic_store(&queue->read, index + 1);
    }
}

status_t hsa_queue_create(handle_t agent, uint32_t size, uint32_t type, void *callback, void *data,
                          uint32_t private_size, uint32_t group_size, PublicQueue **out) {
    (void)type;
    (void)callback;
    (void)data;
    (void)private_size;
    (void)group_size;
    REQUIRE_INIT();
    if (!is_gpu(agent))
        return INVALID_AGENT;
    if (size == 0 || (size & (size - 1)))
        return INVALID_ARGUMENT;
    Queue *queue = calloc(1, sizeof *queue);
    queue->public.base = aligned_alloc(64, (size_t)size * 64);
    for (uint32_t i = 0; i < size; i++)
        *(uint16_t *)((uint8_t *)queue->public.base + i * 64) = PACKET_INVALID;
    queue->public.size = size;
    hsa_signal_create(0, 0, NULL, &queue->public.doorbell);
    pthread_create(&queue->processor, NULL, process, queue);
    live_queues++;
    *out = &queue->public;
    return SUCCESS;
}

status_t hsa_queue_destroy(PublicQueue *public) {
    REQUIRE_INIT();
    Queue *queue = (Queue *)public;
    // HSA requires an idle queue; this one says so by aborting otherwise.
    if (atomic_load(&queue->read) != atomic_load(&queue->write))
        broken("a queue was destroyed with packets not yet processed");
    atomic_store(&queue->stop, 1);
    pthread_join(queue->processor, NULL);
    hsa_signal_destroy(queue->public.doorbell);
    free(queue->public.base);
    free(queue);
    live_queues--;
    return SUCCESS;
}

uint64_t hsa_queue_load_write_index_relaxed(const PublicQueue *public) {
    return atomic_load(&((Queue *)public)->write);
}

uint64_t hsa_queue_add_write_index_screlease(const PublicQueue *public, uint64_t value) {
    return atomic_fetch_add(&((Queue *)public)->write, value);
}

uint64_t hsa_queue_load_read_index_scacquire(const PublicQueue *public) {
    return atomic_load(&((Queue *)public)->read);
}

// ----- DMA copies: a thread each -----
typedef struct {
    void *dst;
    const void *src;
    size_t size;
    uint32_t count;
    handle_t deps[8];
    handle_t completion;
} Copy;

static void *run_copy(void *data) {
    Copy *copy = data;
    for (uint32_t i = 0; i < copy->count; i++)
        wait_zero(copy->deps[i]);
    jitter();
    memmove(copy->dst, copy->src, copy->size);
    complete(copy->completion);
    free(copy);
    return NULL;
}

status_t hsa_amd_memory_async_copy(void *dst, handle_t dst_agent, const void *src, handle_t src_agent,
                                   size_t size, uint32_t count, const handle_t *deps,
                                   handle_t completion) {
    REQUIRE_INIT();
    if (!is_agent(dst_agent) || !is_agent(src_agent))
        return INVALID_AGENT;
    if (count > 8 || !completion.handle)
        return INVALID_ARGUMENT;
    Copy *copy = malloc(sizeof *copy);
    *copy = (Copy){dst, src, size, count, {{0}}, completion};
    memcpy(copy->deps, deps, count * sizeof *deps);
    pthread_t thread;
    pthread_create(&thread, NULL, run_copy, copy);
    pthread_detach(thread);
    return SUCCESS;
}

status_t hsa_amd_memory_fill(void *ptr, uint32_t value, size_t count) {
    REQUIRE_INIT();
    for (size_t i = 0; i < count; i++)
        ((uint32_t *)ptr)[i] = value;
    return SUCCESS;
}

// ----- code objects: the standard kernels' symbols, for any AMDGPU ELF -----
status_t hsa_code_object_reader_create_from_memory(const void *image, size_t size, handle_t *reader) {
    REQUIRE_INIT();
    if (size < 64 || memcmp(image, "\x7f" "ELF", 4) != 0)
        return INVALID_CODE_OBJECT;
    live_readers++;
    reader->handle = 1;
    return SUCCESS;
}

status_t hsa_code_object_reader_destroy(handle_t reader) {
    REQUIRE_INIT();
    (void)reader;
    live_readers--;
    return SUCCESS;
}

status_t hsa_executable_create_alt(uint32_t profile, uint32_t rounding, const char *options,
                                   handle_t *executable) {
    (void)profile;
    (void)rounding;
    (void)options;
    REQUIRE_INIT();
    live_executables++;
    executable->handle = 1;
    return SUCCESS;
}

status_t hsa_executable_load_agent_code_object(handle_t executable, handle_t agent, handle_t reader,
                                               const char *options, void *loaded) {
    (void)executable;
    (void)reader;
    (void)options;
    (void)loaded;
    REQUIRE_INIT();
    return is_gpu(agent) ? SUCCESS : INVALID_AGENT;
}

status_t hsa_executable_freeze(handle_t executable, const char *options) {
    (void)executable;
    (void)options;
    REQUIRE_INIT();
    return SUCCESS;
}

status_t hsa_executable_destroy(handle_t executable) {
    (void)executable;
    REQUIRE_INIT();
    live_executables--;
    return SUCCESS;
}

status_t hsa_executable_get_symbol_by_name(handle_t executable, const char *name,
                                           const handle_t *agent, handle_t *symbol) {
    (void)executable;
    REQUIRE_INIT();
    if (!is_gpu(*agent))
        return INVALID_AGENT;
    static const char *const names[] = {"fill_u32.kd", "axpy_f32.kd", "workgroup_reverse_u32.kd"};
    for (int i = 0; i < 3; i++) {
        if (strcmp(name, names[i]) == 0) {
            symbol->handle = KERNEL_FILL + i;
            return SUCCESS;
        }
    }
    return INVALID_SYMBOL_NAME;
}

status_t hsa_executable_symbol_get_info(handle_t symbol, uint32_t attribute, void *value) {
    REQUIRE_INIT();
    static const uint32_t kernarg_sizes[] = {24, 32, 12};
    switch (attribute) {
    case 22: // KERNEL_OBJECT
        *(uint64_t *)value = symbol.handle;
        return SUCCESS;
    case 11: // KERNARG_SEGMENT_SIZE
        *(uint32_t *)value = kernarg_sizes[symbol.handle - KERNEL_FILL];
        return SUCCESS;
    case 13: // GROUP_SEGMENT_SIZE
    case 14: // PRIVATE_SEGMENT_SIZE
        *(uint32_t *)value = 0;
        return SUCCESS;
    default:
        return INVALID_ARGUMENT;
    }
}
