/* seeded.cu's NVTX annotations (hw/races/pool_nvtx.h: a heap, a region registered in it,
 * then both unregistered), built as plain C by tests/nvtx_headers.rs against the nvtx3 headers
 * it is given; needs no CUDA. Exits 0 when the calls reached a tool that answers as
 * gpu-recorder does (the heap's handle and the region's are their first bytes), 1 otherwise
 * (without a tool NVTX returns NULL handles). */
#include "../../hw/races/pool_nvtx.h"

#include <stdio.h>

static char segment[1 << 16];

int main(void) {
  pool_nvtx_t pool;
  pool_nvtx_annotate(&pool, "regions", segment, sizeof segment);
  void *block = segment + 4096;
  nvtxMemRegionHandle_t region = pool_nvtx_register(&pool, block, 256);
  printf("heap %p (segment %p), region %p (block %p)\n", (void *)pool.heap, (void *)segment,
         (void *)region, block);
  int reached = pool.heap == (nvtxMemHeapHandle_t)segment && region == (nvtxMemRegionHandle_t)block;
  pool_nvtx_unregister(&pool, block);
  pool_nvtx_unannotate(&pool);
  return reached ? 0 : 1;
}
