// HIP on NVIDIA GPUs: exports, as real C symbols, the HIP functions the gpu-hip-ffi bindings
// list (their allow-list in xtask/src/bindgen/rocm.rs, in the same order), so that the same Rust
// HIP backend that loads ROCm's libamdhip64 on AMD GPUs loads this library on NVIDIA GPUs.
//
// HIP's NVIDIA platform is header-only: every hip* function is an inline wrapper over the CUDA
// runtime (and a few over the driver API). Each name is renamed to hip_nv_<name> before the
// headers are included, and an exported hip<name> calls that inline wrapper. `cargo xtask
// hip-shim` compiles this file (as C++: the NVIDIA headers are C++) against HIP 5.2.3's headers
// and CUDA 11.8's, from Debian's libamdhip64-dev and PyPI wheels, and links it to
// libcudart.so.11.0 (found beside this library through its $ORIGIN run path).
//
// The driver API's functions (cu*) are left undefined here and bound lazily: the constructor
// below opens libcuda.so.1 with RTLD_GLOBAL, and each cu* call binds at its first use. Where
// libcuda is absent the functions that need it answer hipErrorInsufficientDriver instead of
// reaching an unbound symbol. Those that need a context first bind the current device's primary
// context (see bind_context).
//
// Three functions translate what the NVIDIA headers pass through unchanged or do not cover, so
// callers see the AMD platform's values that the bindings declare:
// - hipDrvPointerGetAttributes returns memory types as hipMemoryType (CUDA numbers them
//   differently), and memory CUDA does not know (type 0) as hipErrorInvalidValue, as ROCm does;
// - hipDeviceGetAttribute answers the attributes HIP 5.2.3's NVIDIA headers leave out
//   (opt-in shared memory per block, reserved shared memory per block, unified addressing);
// - hipFuncSetAttribute takes a module's function (a CUfunction), as the backend passes it.
//
// The graph functions call the CUDA runtime's (HIP 5.2.3's NVIDIA headers declare their
// wrappers only under nvcc, __CUDACC__) and take the AMD platform's parameter structs, whose
// field order differs from CUDA's (hipKernelNodeParams, hipMemsetParams; AmdKernelNodeParams and
// AmdMemsetParams below): memset nodes are converted to cudaMemsetParams, and kernel nodes go to
// the driver API (cuGraphAddKernelNode, cuGraphExecKernelNodeSetParams of CUDA 11.8's cuda.h,
// the v1 ABI) because their function is a module's CUfunction, which the runtime's
// cudaKernelNodeParams cannot name.

#include <dlfcn.h>
#include <cstddef>

#define hipInit hip_nv_hipInit
#define hipDriverGetVersion hip_nv_hipDriverGetVersion
#define hipRuntimeGetVersion hip_nv_hipRuntimeGetVersion
#define hipGetErrorName hip_nv_hipGetErrorName
#define hipGetErrorString hip_nv_hipGetErrorString
#define hipGetDeviceCount hip_nv_hipGetDeviceCount
#define hipDeviceGet hip_nv_hipDeviceGet
#define hipDeviceGetName hip_nv_hipDeviceGetName
#define hipDeviceGetAttribute hip_nv_hipDeviceGetAttribute
#define hipDeviceTotalMem hip_nv_hipDeviceTotalMem
#define hipSetDevice hip_nv_hipSetDevice
#define hipGetDevice hip_nv_hipGetDevice
#define hipDeviceSynchronize hip_nv_hipDeviceSynchronize
#define hipDeviceReset hip_nv_hipDeviceReset
#define hipDeviceCanAccessPeer hip_nv_hipDeviceCanAccessPeer
#define hipDeviceEnablePeerAccess hip_nv_hipDeviceEnablePeerAccess
#define hipDeviceDisablePeerAccess hip_nv_hipDeviceDisablePeerAccess
#define hipMemGetInfo hip_nv_hipMemGetInfo
#define hipMalloc hip_nv_hipMalloc
#define hipFree hip_nv_hipFree
#define hipMallocAsync hip_nv_hipMallocAsync
#define hipFreeAsync hip_nv_hipFreeAsync
#define hipDeviceGetDefaultMemPool hip_nv_hipDeviceGetDefaultMemPool
#define hipMemPoolSetAttribute hip_nv_hipMemPoolSetAttribute
#define hipMemPoolGetAttribute hip_nv_hipMemPoolGetAttribute
#define hipMemPoolSetAccess hip_nv_hipMemPoolSetAccess
#define hipMallocManaged hip_nv_hipMallocManaged
#define hipHostMalloc hip_nv_hipHostMalloc
#define hipHostFree hip_nv_hipHostFree
#define hipHostRegister hip_nv_hipHostRegister
#define hipHostUnregister hip_nv_hipHostUnregister
#define hipHostGetDevicePointer hip_nv_hipHostGetDevicePointer
#define hipPointerGetAttributes hip_nv_hipPointerGetAttributes
#define hipDrvPointerGetAttributes hip_nv_hipDrvPointerGetAttributes
#define hipStreamCreateWithFlags hip_nv_hipStreamCreateWithFlags
#define hipStreamDestroy hip_nv_hipStreamDestroy
#define hipStreamSynchronize hip_nv_hipStreamSynchronize
#define hipStreamQuery hip_nv_hipStreamQuery
#define hipStreamWaitEvent hip_nv_hipStreamWaitEvent
#define hipEventCreateWithFlags hip_nv_hipEventCreateWithFlags
#define hipEventDestroy hip_nv_hipEventDestroy
#define hipEventRecord hip_nv_hipEventRecord
#define hipEventQuery hip_nv_hipEventQuery
#define hipEventSynchronize hip_nv_hipEventSynchronize
#define hipMemcpyAsync hip_nv_hipMemcpyAsync
#define hipMemcpyPeerAsync hip_nv_hipMemcpyPeerAsync
#define hipMemsetD8Async hip_nv_hipMemsetD8Async
#define hipMemsetD16Async hip_nv_hipMemsetD16Async
#define hipMemsetD32Async hip_nv_hipMemsetD32Async
#define hipModuleLoadData hip_nv_hipModuleLoadData
#define hipModuleUnload hip_nv_hipModuleUnload
#define hipModuleGetFunction hip_nv_hipModuleGetFunction
#define hipFuncSetAttribute hip_nv_hipFuncSetAttribute
#define hipFuncGetAttribute hip_nv_hipFuncGetAttribute
#define hipModuleLaunchKernel hip_nv_hipModuleLaunchKernel
#define __HIP_PLATFORM_NVIDIA__ 1
#define __HIP_PLATFORM_NVCC__ 1
#include <hip/hip_runtime_api.h>
#include <cuda.h>

#undef hipInit
#undef hipDriverGetVersion
#undef hipRuntimeGetVersion
#undef hipGetErrorName
#undef hipGetErrorString
#undef hipGetDeviceCount
#undef hipDeviceGet
#undef hipDeviceGetName
#undef hipDeviceGetAttribute
#undef hipDeviceTotalMem
#undef hipSetDevice
#undef hipGetDevice
#undef hipDeviceSynchronize
#undef hipDeviceReset
#undef hipDeviceCanAccessPeer
#undef hipDeviceEnablePeerAccess
#undef hipDeviceDisablePeerAccess
#undef hipMemGetInfo
#undef hipMalloc
#undef hipFree
#undef hipMallocAsync
#undef hipFreeAsync
#undef hipDeviceGetDefaultMemPool
#undef hipMemPoolSetAttribute
#undef hipMemPoolGetAttribute
#undef hipMemPoolSetAccess
#undef hipMallocManaged
#undef hipHostMalloc
#undef hipHostFree
#undef hipHostRegister
#undef hipHostUnregister
#undef hipHostGetDevicePointer
#undef hipPointerGetAttributes
#undef hipDrvPointerGetAttributes
#undef hipStreamCreateWithFlags
#undef hipStreamDestroy
#undef hipStreamSynchronize
#undef hipStreamQuery
#undef hipStreamWaitEvent
#undef hipEventCreateWithFlags
#undef hipEventDestroy
#undef hipEventRecord
#undef hipEventQuery
#undef hipEventSynchronize
#undef hipMemcpyAsync
#undef hipMemcpyPeerAsync
#undef hipMemsetD8Async
#undef hipMemsetD16Async
#undef hipMemsetD32Async
#undef hipModuleLoadData
#undef hipModuleUnload
#undef hipModuleGetFunction
#undef hipFuncSetAttribute
#undef hipFuncGetAttribute
#undef hipModuleLaunchKernel

#define SHIM_EXPORT extern "C" __attribute__((visibility("default")))

// The values the bindings were generated with (AMD platform headers); CUDA's must agree, as
// the Rust side passes these numbers through unchanged.
static_assert(hipHostRegisterPortable == 1 && hipHostRegisterMapped == 2, "host register flags");
static_assert(hipHostMallocPortable == 1 && hipHostMallocMapped == 2, "host alloc flags");
static_assert(hipStreamNonBlocking == 1 && hipEventDisableTiming == 2, "stream and event flags");
static_assert(hipMemAttachGlobal == 1, "managed memory flag");
static_assert(hipMemcpyDefault == 4, "copy kind");
static_assert(cudaMemPoolAttrReleaseThreshold == 4, "pool attribute (hipMemPoolAttrReleaseThreshold)");
static_assert(cudaMemLocationTypeDevice == 1 && cudaMemAccessFlagsProtReadWrite == 3,
              "pool access (hipMemLocationTypeDevice, hipMemAccessFlagsProtReadWrite)");
static_assert(sizeof(hipMemAccessDesc) == 12 && offsetof(hipMemAccessDesc, flags) == 8,
              "hipMemAccessDesc layout");
static_assert(HIP_POINTER_ATTRIBUTE_MEMORY_TYPE == 2 && HIP_POINTER_ATTRIBUTE_RANGE_START_ADDR == 11
              && HIP_POINTER_ATTRIBUTE_RANGE_SIZE == 12, "pointer attributes");

// Whether the constructor found the driver library.
static bool driver_loaded = false;

__attribute__((constructor)) static void load_driver() {
    driver_loaded = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL) != nullptr;
}

#define NEEDS_DRIVER()                         \
    do {                                       \
        if (!driver_loaded) {                  \
            return hipErrorInsufficientDriver; \
        }                                      \
    } while (0)

// Whether the calling thread's current device has its primary context bound for the driver
// API. CUDA 11.8's cudaSetDevice defers that binding to the next runtime call, but the driver
// API (modules, launches, memsets) uses whatever context is current; so after a device switch
// through this shim, and on a new thread, the first driver call binds it with cudaFree(0).
static thread_local bool context_bound = false;

static hipError_t bind_context() {
    if (context_bound) {
        return hipSuccess;
    }
    cudaError_t status = cudaFree(nullptr);
    if (status != cudaSuccess) {
        return hipCUDAErrorTohipError(status);
    }
    context_bound = true;
    return hipSuccess;
}

#define NEEDS_CONTEXT()                          \
    do {                                         \
        NEEDS_DRIVER();                          \
        hipError_t bound = bind_context();       \
        if (bound != hipSuccess) {               \
            return bound;                        \
        }                                        \
    } while (0)

SHIM_EXPORT hipError_t hipInit(unsigned int flags) {
    NEEDS_DRIVER();
    return hip_nv_hipInit(flags);
}

SHIM_EXPORT hipError_t hipDriverGetVersion(int* driverVersion) {
    return hip_nv_hipDriverGetVersion(driverVersion);
}

SHIM_EXPORT hipError_t hipRuntimeGetVersion(int* runtimeVersion) {
    return hip_nv_hipRuntimeGetVersion(runtimeVersion);
}

SHIM_EXPORT const char* hipGetErrorName(hipError_t hip_error) {
    return hip_nv_hipGetErrorName(hip_error);
}

SHIM_EXPORT const char* hipGetErrorString(hipError_t hipError) {
    return hip_nv_hipGetErrorString(hipError);
}

SHIM_EXPORT hipError_t hipGetDeviceCount(int* count) {
    return hip_nv_hipGetDeviceCount(count);
}

SHIM_EXPORT hipError_t hipDeviceGet(hipDevice_t* device, int ordinal) {
    NEEDS_DRIVER();
    return hip_nv_hipDeviceGet(device, ordinal);
}

SHIM_EXPORT hipError_t hipDeviceGetName(char* name, int len, hipDevice_t device) {
    NEEDS_DRIVER();
    return hip_nv_hipDeviceGetName(name, len, device);
}

SHIM_EXPORT hipError_t hipDeviceTotalMem(size_t* bytes, hipDevice_t device) {
    NEEDS_DRIVER();
    return hip_nv_hipDeviceTotalMem(bytes, device);
}

SHIM_EXPORT hipError_t hipSetDevice(int deviceId) {
    context_bound = false;
    return hip_nv_hipSetDevice(deviceId);
}

SHIM_EXPORT hipError_t hipGetDevice(int* deviceId) {
    return hip_nv_hipGetDevice(deviceId);
}

SHIM_EXPORT hipError_t hipDeviceSynchronize(void) {
    return hip_nv_hipDeviceSynchronize();
}

SHIM_EXPORT hipError_t hipDeviceReset(void) {
    return hip_nv_hipDeviceReset();
}

SHIM_EXPORT hipError_t hipDeviceCanAccessPeer(int* canAccessPeer, int deviceId, int peerDeviceId) {
    return hip_nv_hipDeviceCanAccessPeer(canAccessPeer, deviceId, peerDeviceId);
}

SHIM_EXPORT hipError_t hipDeviceEnablePeerAccess(int peerDeviceId, unsigned int flags) {
    return hip_nv_hipDeviceEnablePeerAccess(peerDeviceId, flags);
}

SHIM_EXPORT hipError_t hipDeviceDisablePeerAccess(int peerDeviceId) {
    return hip_nv_hipDeviceDisablePeerAccess(peerDeviceId);
}

SHIM_EXPORT hipError_t hipMemGetInfo(size_t* free, size_t* total) {
    return hip_nv_hipMemGetInfo(free, total);
}

SHIM_EXPORT hipError_t hipMalloc(void** ptr, size_t size) {
    return hip_nv_hipMalloc(ptr, size);
}

SHIM_EXPORT hipError_t hipFree(void* ptr) {
    return hip_nv_hipFree(ptr);
}

SHIM_EXPORT hipError_t hipMallocAsync(void** dev_ptr, size_t size, hipStream_t stream) {
    return hip_nv_hipMallocAsync(dev_ptr, size, stream);
}

SHIM_EXPORT hipError_t hipFreeAsync(void* dev_ptr, hipStream_t stream) {
    return hip_nv_hipFreeAsync(dev_ptr, stream);
}

SHIM_EXPORT hipError_t hipDeviceGetDefaultMemPool(hipMemPool_t* mem_pool, int device) {
    return hip_nv_hipDeviceGetDefaultMemPool(mem_pool, device);
}

SHIM_EXPORT hipError_t hipMemPoolSetAttribute(hipMemPool_t mem_pool, hipMemPoolAttr attr, void* value) {
    return hip_nv_hipMemPoolSetAttribute(mem_pool, attr, value);
}

SHIM_EXPORT hipError_t hipMemPoolGetAttribute(hipMemPool_t mem_pool, hipMemPoolAttr attr, void* value) {
    return hip_nv_hipMemPoolGetAttribute(mem_pool, attr, value);
}

SHIM_EXPORT hipError_t hipMemPoolSetAccess(hipMemPool_t mem_pool, const hipMemAccessDesc* desc_list, size_t count) {
    return hip_nv_hipMemPoolSetAccess(mem_pool, desc_list, count);
}

SHIM_EXPORT hipError_t hipMallocManaged(void** dev_ptr, size_t size, unsigned int flags) {
    return hip_nv_hipMallocManaged(dev_ptr, size, flags);
}

SHIM_EXPORT hipError_t hipHostMalloc(void** ptr, size_t size, unsigned int flags) {
    return hip_nv_hipHostMalloc(ptr, size, flags);
}

SHIM_EXPORT hipError_t hipHostFree(void* ptr) {
    return hip_nv_hipHostFree(ptr);
}

SHIM_EXPORT hipError_t hipHostRegister(void* hostPtr, size_t sizeBytes, unsigned int flags) {
    return hip_nv_hipHostRegister(hostPtr, sizeBytes, flags);
}

SHIM_EXPORT hipError_t hipHostUnregister(void* hostPtr) {
    return hip_nv_hipHostUnregister(hostPtr);
}

SHIM_EXPORT hipError_t hipHostGetDevicePointer(void** devPtr, void* hstPtr, unsigned int flags) {
    return hip_nv_hipHostGetDevicePointer(devPtr, hstPtr, flags);
}

SHIM_EXPORT hipError_t hipPointerGetAttributes(hipPointerAttribute_t* attributes, const void* ptr) {
    return hip_nv_hipPointerGetAttributes(attributes, ptr);
}

SHIM_EXPORT hipError_t hipStreamCreateWithFlags(hipStream_t* stream, unsigned int flags) {
    return hip_nv_hipStreamCreateWithFlags(stream, flags);
}

SHIM_EXPORT hipError_t hipStreamDestroy(hipStream_t stream) {
    return hip_nv_hipStreamDestroy(stream);
}

SHIM_EXPORT hipError_t hipStreamSynchronize(hipStream_t stream) {
    return hip_nv_hipStreamSynchronize(stream);
}

SHIM_EXPORT hipError_t hipStreamQuery(hipStream_t stream) {
    return hip_nv_hipStreamQuery(stream);
}

SHIM_EXPORT hipError_t hipStreamWaitEvent(hipStream_t stream, hipEvent_t event, unsigned int flags) {
    return hip_nv_hipStreamWaitEvent(stream, event, flags);
}

SHIM_EXPORT hipError_t hipEventCreateWithFlags(hipEvent_t* event, unsigned flags) {
    return hip_nv_hipEventCreateWithFlags(event, flags);
}

SHIM_EXPORT hipError_t hipEventDestroy(hipEvent_t event) {
    return hip_nv_hipEventDestroy(event);
}

SHIM_EXPORT hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream) {
    return hip_nv_hipEventRecord(event, stream);
}

SHIM_EXPORT hipError_t hipEventQuery(hipEvent_t event) {
    return hip_nv_hipEventQuery(event);
}

SHIM_EXPORT hipError_t hipEventSynchronize(hipEvent_t event) {
    return hip_nv_hipEventSynchronize(event);
}

SHIM_EXPORT hipError_t hipMemcpyAsync(void* dst, const void* src, size_t sizeBytes, hipMemcpyKind kind, hipStream_t stream) {
    return hip_nv_hipMemcpyAsync(dst, src, sizeBytes, kind, stream);
}

SHIM_EXPORT hipError_t hipMemcpyPeerAsync(void* dst, int dstDeviceId, const void* src, int srcDeviceId, size_t sizeBytes, hipStream_t stream) {
    return hip_nv_hipMemcpyPeerAsync(dst, dstDeviceId, src, srcDeviceId, sizeBytes, stream);
}

SHIM_EXPORT hipError_t hipMemsetD8Async(hipDeviceptr_t dest, unsigned char value, size_t count, hipStream_t stream) {
    NEEDS_CONTEXT();
    return hip_nv_hipMemsetD8Async(dest, value, count, stream);
}

SHIM_EXPORT hipError_t hipMemsetD16Async(hipDeviceptr_t dest, unsigned short value, size_t count, hipStream_t stream) {
    NEEDS_CONTEXT();
    return hip_nv_hipMemsetD16Async(dest, value, count, stream);
}

SHIM_EXPORT hipError_t hipMemsetD32Async(hipDeviceptr_t dst, int value, size_t count, hipStream_t stream) {
    NEEDS_CONTEXT();
    return hip_nv_hipMemsetD32Async(dst, value, count, stream);
}

SHIM_EXPORT hipError_t hipModuleLoadData(hipModule_t* module, const void* image) {
    NEEDS_CONTEXT();
    return hip_nv_hipModuleLoadData(module, image);
}

SHIM_EXPORT hipError_t hipModuleUnload(hipModule_t module) {
    NEEDS_CONTEXT();
    return hip_nv_hipModuleUnload(module);
}

SHIM_EXPORT hipError_t hipModuleGetFunction(hipFunction_t* function, hipModule_t module, const char* kname) {
    NEEDS_CONTEXT();
    return hip_nv_hipModuleGetFunction(function, module, kname);
}

SHIM_EXPORT hipError_t hipFuncGetAttribute(int* value, hipFunction_attribute attrib, hipFunction_t hfunc) {
    NEEDS_CONTEXT();
    return hip_nv_hipFuncGetAttribute(value, attrib, hfunc);
}

SHIM_EXPORT hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, hipStream_t stream, void** kernelParams, void** extra) {
    NEEDS_CONTEXT();
    return hip_nv_hipModuleLaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, stream, kernelParams, extra);
}

SHIM_EXPORT hipError_t hipDrvPointerGetAttributes(unsigned int numAttributes,
                                                   hipPointer_attribute* attributes, void** data,
                                                   hipDeviceptr_t ptr) {
    NEEDS_CONTEXT();
    hipError_t status = hip_nv_hipDrvPointerGetAttributes(numAttributes, attributes, data, ptr);
    if (status != hipSuccess) {
        return status;
    }
    for (unsigned int i = 0; i < numAttributes; ++i) {
        if (attributes[i] != HIP_POINTER_ATTRIBUTE_MEMORY_TYPE) {
            continue;
        }
        unsigned int* type = static_cast<unsigned int*>(data[i]);
        switch (*type) {
            case CU_MEMORYTYPE_HOST: *type = hipMemoryTypeHost; break;
            case CU_MEMORYTYPE_DEVICE: *type = hipMemoryTypeDevice; break;
            case CU_MEMORYTYPE_ARRAY: *type = hipMemoryTypeArray; break;
            case CU_MEMORYTYPE_UNIFIED: *type = hipMemoryTypeUnified; break;
            default: return hipErrorInvalidValue;  // memory CUDA does not know
        }
    }
    return hipSuccess;
}

SHIM_EXPORT hipError_t hipDeviceGetAttribute(int* pi, hipDeviceAttribute_t attr, int deviceId) {
    cudaDeviceAttr cuda;
    switch (attr) {
        case hipDeviceAttributeSharedMemPerBlockOptin:
            cuda = cudaDevAttrMaxSharedMemoryPerBlockOptin;
            break;
        case hipDeviceAttributeReservedSharedMemPerBlock:
            cuda = cudaDevAttrReservedSharedMemoryPerBlock;
            break;
        case hipDeviceAttributeUnifiedAddressing:
            cuda = cudaDevAttrUnifiedAddressing;
            break;
        default:
            return hip_nv_hipDeviceGetAttribute(pi, attr, deviceId);
    }
    return hipCUDAErrorTohipError(cudaDeviceGetAttribute(pi, cuda, deviceId));
}

SHIM_EXPORT hipError_t hipFuncSetAttribute(const void* func, hipFuncAttribute attr, int value) {
    NEEDS_CONTEXT();
    if (attr != hipFuncAttributeMaxDynamicSharedMemorySize) {
        return hipErrorNotSupported;
    }
    CUfunction function = reinterpret_cast<CUfunction>(const_cast<void*>(func));
    return hipCUResultTohipError(
        cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, value));
}

// The AMD platform's graph parameter structs (hip_runtime_api.h of ROCm 5.2.3), as the Rust
// bindings lay them out; the NVIDIA headers' hipKernelNodeParams and hipMemsetParams are CUDA's
// structs, with another field order.
struct AmdKernelNodeParams {
    dim3 blockDim;
    void** extra;
    void* func;
    dim3 gridDim;
    void** kernelParams;
    unsigned int sharedMemBytes;
};
struct AmdMemsetParams {
    void* dst;
    unsigned int elementSize;
    size_t height;
    size_t pitch;
    unsigned int value;
    size_t width;
};
static_assert(sizeof(AmdKernelNodeParams) == 64 && offsetof(AmdKernelNodeParams, func) == 24
              && offsetof(AmdKernelNodeParams, kernelParams) == 48, "hipKernelNodeParams layout");
static_assert(sizeof(AmdMemsetParams) == 48 && offsetof(AmdMemsetParams, value) == 32
              && offsetof(AmdMemsetParams, width) == 40, "hipMemsetParams layout");

static CUDA_KERNEL_NODE_PARAMS kernel_node_params(const AmdKernelNodeParams* p) {
    CUDA_KERNEL_NODE_PARAMS params = {};
    params.func = reinterpret_cast<CUfunction>(p->func);
    params.gridDimX = p->gridDim.x;
    params.gridDimY = p->gridDim.y;
    params.gridDimZ = p->gridDim.z;
    params.blockDimX = p->blockDim.x;
    params.blockDimY = p->blockDim.y;
    params.blockDimZ = p->blockDim.z;
    params.sharedMemBytes = p->sharedMemBytes;
    params.kernelParams = p->kernelParams;
    params.extra = p->extra;
    return params;
}

static cudaMemsetParams memset_params(const AmdMemsetParams* p) {
    cudaMemsetParams params = {};
    params.dst = p->dst;
    params.pitch = p->pitch;
    params.value = p->value;
    params.elementSize = p->elementSize;
    params.width = p->width;
    params.height = p->height;
    return params;
}

SHIM_EXPORT hipError_t hipGraphCreate(hipGraph_t* pGraph, unsigned int flags) {
    return hipCUDAErrorTohipError(cudaGraphCreate(pGraph, flags));
}

SHIM_EXPORT hipError_t hipGraphDestroy(hipGraph_t graph) {
    return hipCUDAErrorTohipError(cudaGraphDestroy(graph));
}

SHIM_EXPORT hipError_t hipGraphAddKernelNode(hipGraphNode_t* pGraphNode, hipGraph_t graph, const hipGraphNode_t* pDependencies, size_t numDependencies, const AmdKernelNodeParams* pNodeParams) {
    NEEDS_CONTEXT();
    if (pNodeParams == nullptr) {
        return hipErrorInvalidValue;
    }
    CUDA_KERNEL_NODE_PARAMS params = kernel_node_params(pNodeParams);
    return hipCUResultTohipError(
        cuGraphAddKernelNode(pGraphNode, graph, pDependencies, numDependencies, &params));
}

SHIM_EXPORT hipError_t hipGraphAddMemcpyNode1D(hipGraphNode_t* pGraphNode, hipGraph_t graph, const hipGraphNode_t* pDependencies, size_t numDependencies, void* dst, const void* src, size_t count, hipMemcpyKind kind) {
    return hipCUDAErrorTohipError(cudaGraphAddMemcpyNode1D(
        pGraphNode, graph, pDependencies, numDependencies, dst, src, count, static_cast<cudaMemcpyKind>(kind)));
}

SHIM_EXPORT hipError_t hipGraphAddMemsetNode(hipGraphNode_t* pGraphNode, hipGraph_t graph, const hipGraphNode_t* pDependencies, size_t numDependencies, const AmdMemsetParams* pMemsetParams) {
    if (pMemsetParams == nullptr) {
        return hipErrorInvalidValue;
    }
    cudaMemsetParams params = memset_params(pMemsetParams);
    return hipCUDAErrorTohipError(
        cudaGraphAddMemsetNode(pGraphNode, graph, pDependencies, numDependencies, &params));
}

SHIM_EXPORT hipError_t hipGraphInstantiateWithFlags(hipGraphExec_t* pGraphExec, hipGraph_t graph, unsigned long long flags) {
    return hipCUDAErrorTohipError(cudaGraphInstantiateWithFlags(pGraphExec, graph, flags));
}

SHIM_EXPORT hipError_t hipGraphLaunch(hipGraphExec_t graphExec, hipStream_t stream) {
    return hipCUDAErrorTohipError(cudaGraphLaunch(graphExec, stream));
}

SHIM_EXPORT hipError_t hipGraphExecDestroy(hipGraphExec_t graphExec) {
    return hipCUDAErrorTohipError(cudaGraphExecDestroy(graphExec));
}

SHIM_EXPORT hipError_t hipGraphExecKernelNodeSetParams(hipGraphExec_t hGraphExec, hipGraphNode_t node, const AmdKernelNodeParams* pNodeParams) {
    NEEDS_CONTEXT();
    if (pNodeParams == nullptr) {
        return hipErrorInvalidValue;
    }
    CUDA_KERNEL_NODE_PARAMS params = kernel_node_params(pNodeParams);
    return hipCUResultTohipError(cuGraphExecKernelNodeSetParams(hGraphExec, node, &params));
}

SHIM_EXPORT hipError_t hipGraphExecMemcpyNodeSetParams1D(hipGraphExec_t hGraphExec, hipGraphNode_t node, void* dst, const void* src, size_t count, hipMemcpyKind kind) {
    return hipCUDAErrorTohipError(cudaGraphExecMemcpyNodeSetParams1D(
        hGraphExec, node, dst, src, count, static_cast<cudaMemcpyKind>(kind)));
}

SHIM_EXPORT hipError_t hipGraphExecMemsetNodeSetParams(hipGraphExec_t hGraphExec, hipGraphNode_t node, const AmdMemsetParams* pNodeParams) {
    if (pNodeParams == nullptr) {
        return hipErrorInvalidValue;
    }
    cudaMemsetParams params = memset_params(pNodeParams);
    return hipCUDAErrorTohipError(cudaGraphExecMemsetNodeSetParams(hGraphExec, node, &params));
}

// Virtual memory management. HIP 5.2.3's NVIDIA headers have none of it, so these call the
// driver API (cuMem*, CUDA 11.8's cuda.h) themselves, taking the AMD platform's types as the
// bindings lay them out: hipMemAllocationProp in AMD's field order, and the opaque
// hipMemGenericAllocationHandle_t carrying the driver's 64-bit CUmemGenericAllocationHandle.
// hipMemAccessDesc and hipMemLocation are CUDA's own structs on both platforms.
struct AmdMemAllocationProp {
    unsigned char compressionType;
    hipMemLocation location;
    unsigned int requestedHandleType;
    unsigned int type;
    unsigned short usage;
    void* win32HandleMetaData;
};
static_assert(sizeof(AmdMemAllocationProp) == 32 && offsetof(AmdMemAllocationProp, location) == 4
              && offsetof(AmdMemAllocationProp, type) == 16
              && offsetof(AmdMemAllocationProp, win32HandleMetaData) == 24,
              "hipMemAllocationProp layout");
static_assert(sizeof(void*) == sizeof(CUmemGenericAllocationHandle), "handle in a pointer");
// hipMemAllocationTypePinned, hipMemHandleTypeNone, hipMemAllocationGranularityMinimum.
static_assert(CU_MEM_ALLOCATION_TYPE_PINNED == 1 && CU_MEM_HANDLE_TYPE_NONE == 0
              && CU_MEM_ALLOC_GRANULARITY_MINIMUM == 0, "virtual memory constants");

static CUmemAllocationProp allocation_prop(const AmdMemAllocationProp* p) {
    CUmemAllocationProp prop = {};
    prop.type = static_cast<CUmemAllocationType>(p->type);
    prop.requestedHandleTypes = static_cast<CUmemAllocationHandleType>(p->requestedHandleType);
    prop.location.type = static_cast<CUmemLocationType>(p->location.type);
    prop.location.id = p->location.id;
    prop.win32HandleMetaData = p->win32HandleMetaData;
    prop.allocFlags.compressionType = p->compressionType;
    prop.allocFlags.usage = p->usage;
    return prop;
}

// Answers hipErrorNotSupported on a device without virtual memory management (the attribute
// HIP 5.2.3 does not name), as ROCm answers where it has none.
SHIM_EXPORT hipError_t hipMemGetAllocationGranularity(size_t* granularity, const AmdMemAllocationProp* prop, unsigned int option) {
    NEEDS_DRIVER();
    if (granularity == nullptr || prop == nullptr) {
        return hipErrorInvalidValue;
    }
    int supported = 0;
    CUresult status = cuDeviceGetAttribute(
        &supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, prop->location.id);
    if (status != CUDA_SUCCESS) {
        return hipCUResultTohipError(status);
    }
    if (!supported) {
        return hipErrorNotSupported;
    }
    CUmemAllocationProp driver_prop = allocation_prop(prop);
    return hipCUResultTohipError(cuMemGetAllocationGranularity(
        granularity, &driver_prop, static_cast<CUmemAllocationGranularity_flags>(option)));
}

SHIM_EXPORT hipError_t hipMemAddressReserve(void** ptr, size_t size, size_t alignment, void* addr, unsigned long long flags) {
    NEEDS_CONTEXT();
    if (ptr == nullptr) {
        return hipErrorInvalidValue;
    }
    CUdeviceptr reserved = 0;
    CUresult status = cuMemAddressReserve(
        &reserved, size, alignment, reinterpret_cast<CUdeviceptr>(addr), flags);
    *ptr = reinterpret_cast<void*>(reserved);
    return hipCUResultTohipError(status);
}

SHIM_EXPORT hipError_t hipMemAddressFree(void* devPtr, size_t size) {
    NEEDS_CONTEXT();
    return hipCUResultTohipError(cuMemAddressFree(reinterpret_cast<CUdeviceptr>(devPtr), size));
}

SHIM_EXPORT hipError_t hipMemCreate(void** handle, size_t size, const AmdMemAllocationProp* prop, unsigned long long flags) {
    NEEDS_CONTEXT();
    if (handle == nullptr || prop == nullptr) {
        return hipErrorInvalidValue;
    }
    CUmemAllocationProp driver_prop = allocation_prop(prop);
    CUmemGenericAllocationHandle created = 0;
    CUresult status = cuMemCreate(&created, size, &driver_prop, flags);
    *handle = reinterpret_cast<void*>(created);
    return hipCUResultTohipError(status);
}

SHIM_EXPORT hipError_t hipMemRelease(void* handle) {
    NEEDS_CONTEXT();
    return hipCUResultTohipError(cuMemRelease(reinterpret_cast<CUmemGenericAllocationHandle>(handle)));
}

SHIM_EXPORT hipError_t hipMemMap(void* ptr, size_t size, size_t offset, void* handle, unsigned long long flags) {
    NEEDS_CONTEXT();
    return hipCUResultTohipError(cuMemMap(reinterpret_cast<CUdeviceptr>(ptr), size, offset,
                                          reinterpret_cast<CUmemGenericAllocationHandle>(handle), flags));
}

SHIM_EXPORT hipError_t hipMemUnmap(void* ptr, size_t size) {
    NEEDS_CONTEXT();
    return hipCUResultTohipError(cuMemUnmap(reinterpret_cast<CUdeviceptr>(ptr), size));
}

SHIM_EXPORT hipError_t hipMemSetAccess(void* ptr, size_t size, const hipMemAccessDesc* desc, size_t count) {
    NEEDS_CONTEXT();
    return hipCUResultTohipError(cuMemSetAccess(reinterpret_cast<CUdeviceptr>(ptr), size,
                                                reinterpret_cast<const CUmemAccessDesc*>(desc), count));
}
