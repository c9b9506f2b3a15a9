/* Counts every CUDA driver API call a process makes, through CUPTI's callback API, loaded into
 * an unchanged program with CUDA_INJECTION64_PATH. At exit it prints one line per function
 * called ("count name") to the file COUNTER_OUT names (or stderr). */
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_CBID 4096
static unsigned long long counts[MAX_CBID];
static unsigned long long nanos[MAX_CBID]; /* time inside each function, ENTER to EXIT */
static __thread unsigned long long entered;

static unsigned long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}
static CUpti_SubscriberHandle subscriber;

static void CUPTIAPI on_call(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                             const void *data) {
    (void)userdata;
    const CUpti_CallbackData *info = (const CUpti_CallbackData *)data;
    if (domain != CUPTI_CB_DOMAIN_DRIVER_API || cbid >= MAX_CBID) return;
    if (info->callbackSite == CUPTI_API_ENTER) {
        __atomic_fetch_add(&counts[cbid], 1, __ATOMIC_RELAXED);
        entered = now_ns();
    } else {
        __atomic_fetch_add(&nanos[cbid], now_ns() - entered, __ATOMIC_RELAXED);
    }
}

static void report(void) {
    const char *path = getenv("COUNTER_OUT");
    FILE *out = path ? fopen(path, "w") : stderr;
    if (!out) out = stderr;
    for (int cbid = 0; cbid < MAX_CBID; cbid++) {
        if (!counts[cbid]) continue;
        const char *name = NULL;
        if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_DRIVER_API, cbid, &name) != CUPTI_SUCCESS || !name)
            name = "?";
        fprintf(out, "%llu %s %llu\n", counts[cbid], name, nanos[cbid]);
    }
    if (out != stderr) fclose(out);
}

int InitializeInjection(void) {
    if (cuptiSubscribe(&subscriber, (CUpti_CallbackFunc)on_call, NULL) != CUPTI_SUCCESS) return 0;
    cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API);
    atexit(report);
    return 1;
}
