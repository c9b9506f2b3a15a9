/* A sub-allocator's NVTX memory annotations, as seeded.cu's pool makes them: a heap of one
 * range, then a region in it. Exits 0 when both calls reached a tool that answers as
 * gpu-recorder does (the heap's handle and the region's are their first bytes), 1 otherwise
 * (without a tool NVTX returns NULL handles). Built by tests/nvtx_headers.rs against the nvtx3
 * headers it is given; needs no CUDA. */
#include <nvtx3/nvToolsExtMem.h>
#include <stdio.h>
#include <string.h>

static char pool[1 << 16];

int main(void) {
  nvtxMemVirtualRangeDesc_t range = {sizeof pool, pool};
  nvtxMemHeapDesc_t heap;
  memset(&heap, 0, sizeof heap);
  heap.extCompatID = NVTX_EXT_COMPATID_MEM;
  heap.structSize = sizeof heap;
  heap.usage = NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR;
  heap.type = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
  heap.typeSpecificDescSize = sizeof range;
  heap.typeSpecificDesc = &range;
  nvtxDomainHandle_t domain = nvtxDomainCreateA("regions");
  nvtxMemHeapHandle_t handle = nvtxMemHeapRegister(domain, &heap);

  nvtxMemVirtualRangeDesc_t block = {256, pool + 4096};
  nvtxMemRegionHandle_t region = 0;
  nvtxMemRegionsRegisterBatch_t batch;
  memset(&batch, 0, sizeof batch);
  batch.extCompatID = NVTX_EXT_COMPATID_MEM;
  batch.structSize = sizeof batch;
  batch.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
  batch.heap = handle;
  batch.regionCount = 1;
  batch.regionDescElementSize = sizeof block;
  batch.regionDescElements = &block;
  batch.regionHandleElementsOut = &region;
  nvtxMemRegionsRegister(domain, &batch);

  printf("heap %p (pool %p), region %p (block %p)\n", (void *)handle, (void *)pool,
         (void *)region, (void *)(pool + 4096));
  return handle == (nvtxMemHeapHandle_t)pool && region == (nvtxMemRegionHandle_t)(pool + 4096)
             ? 0
             : 1;
}
