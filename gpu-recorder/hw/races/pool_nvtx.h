// NVTX memory annotations of a sub-allocator (seeded.cu's C pool): a heap for its segment, a
// region registered for each block handed out and unregistered when it is taken back. Tools
// attached through NVTX_INJECTION64_PATH receive them (gpu-recorder narrows launch footprints
// to the regions); without a tool each call costs a check. Plain C and C++ (nvcc), so that
// gpu-recorder/tests/nvtx/regions.c builds the very same calls with cc against real nvtx3
// headers, without CUDA.
#ifndef POOL_NVTX_H
#define POOL_NVTX_H
#include <nvtx3/nvToolsExtMem.h>
#include <string.h>

// Zeroes an NVTX memory-extension structure, then sets its compatibility id and size.
#define POOL_NVTX_START(desc)                                                    \
  do {                                                                           \
    memset(&(desc), 0, sizeof(desc));                                            \
    (desc).extCompatID = NVTX_EXT_COMPATID_MEM;                                  \
    (desc).structSize = sizeof(desc);                                            \
  } while (0)

typedef struct {
  nvtxDomainHandle_t domain;
  nvtxMemHeapHandle_t heap;
} pool_nvtx_t;

// Registers the segment of `bytes` at `segment` as a sub-allocator's heap in a domain `name`.
static inline void pool_nvtx_annotate(pool_nvtx_t *n, const char *name, void *segment, size_t bytes) {
  nvtxMemVirtualRangeDesc_t range;
  range.size = bytes;
  range.ptr = segment;
  nvtxMemHeapDesc_t heap;
  POOL_NVTX_START(heap);
  heap.usage = NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR;
  heap.type = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
  heap.typeSpecificDescSize = sizeof range;
  heap.typeSpecificDesc = &range;
  n->domain = nvtxDomainCreateA(name);
  n->heap = nvtxMemHeapRegister(n->domain, &heap);
}

// Registers the block of `bytes` at `ptr` as a region of the heap; returns the handle the tool
// gave it (NULL without a tool).
static inline nvtxMemRegionHandle_t pool_nvtx_register(pool_nvtx_t *n, void *ptr, size_t bytes) {
  nvtxMemVirtualRangeDesc_t range;
  range.size = bytes;
  range.ptr = ptr;
  nvtxMemRegionHandle_t handle = NULL;
  nvtxMemRegionsRegisterBatch_t batch;
  POOL_NVTX_START(batch);
  batch.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
  batch.heap = n->heap;
  batch.regionCount = 1;
  batch.regionDescElementSize = sizeof range;
  batch.regionDescElements = &range;
  batch.regionHandleElementsOut = &handle;
  nvtxMemRegionsRegister(n->domain, &batch);
  return handle;
}

// Unregisters the region at `ptr`.
static inline void pool_nvtx_unregister(pool_nvtx_t *n, void *ptr) {
  nvtxMemRegionRef_t ref;
  ref.pointer = ptr;
  nvtxMemRegionsUnregisterBatch_t batch;
  POOL_NVTX_START(batch);
  batch.refType = NVTX_MEM_REGION_REF_TYPE_POINTER;
  batch.refCount = 1;
  batch.refElementSize = sizeof ref;
  batch.refElements = &ref;
  nvtxMemRegionsUnregister(n->domain, &batch);
}

// Unregisters the heap.
static inline void pool_nvtx_unannotate(pool_nvtx_t *n) { nvtxMemHeapUnregister(n->domain, n->heap); }
#endif
