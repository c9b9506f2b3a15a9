// PyTorch's caching allocator's blocks into gpu-recorder's trace: an allocator trace tracker
// forwarding each block handed out (ALLOC) and each free asked for (FREE_REQUESTED) to the
// recorder's hook gpu_recorder_block, allocator `torch` (the op's second byte, 1).
//
// Compiled on the GPU machine against the installed torch's headers by build.sh and loaded by
// sitecustomize.py once torch's CUDA is initialised (its device allocators exist only then).
// The recorder holds a free until the freeing thread's event records (record_stream's streams)
// are seen; FREE_COMPLETED and segment entries are not needed (segments are cuMemAlloc calls
// the recorder sees itself). Tracker callbacks run under the allocator's lock and call no
// PyTorch code.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <type_traits>

namespace {

using Hook = void (*)(uint32_t, uint64_t, uint64_t, uint64_t);
Hook hook = nullptr;
constexpr uint32_t TORCH = 1u << 8;

// The raw CUstream of a trace entry's stream, whichever type this torch version keeps.
[[maybe_unused]] uint64_t raw_stream(cudaStream_t stream) {
  return reinterpret_cast<uintptr_t>(stream);
}
// torch 2.11's c10::CachingDeviceAllocator::TraceEntry keeps it as a `void *`.
[[maybe_unused]] uint64_t raw_stream(const void* stream) {
  return reinterpret_cast<uintptr_t>(stream);
}
[[maybe_unused]] uint64_t raw_stream(const c10::cuda::CUDAStream& stream) {
  return reinterpret_cast<uintptr_t>(stream.stream());
}
[[maybe_unused]] uint64_t raw_stream(const c10::Stream& stream) {
  return reinterpret_cast<uintptr_t>(
      c10::cuda::CUDAStream(c10::cuda::CUDAStream::UNCHECKED, stream).stream());
}

template <class Entry>
void track(const Entry& entry) {
  using Action = typename Entry::Action;
  uint32_t op;
  if (entry.action_ == Action::ALLOC) {
    op = 0;
  } else if (entry.action_ == Action::FREE_REQUESTED) {
    op = 1;
  } else {
    return;
  }
  hook(op | TORCH, static_cast<uint64_t>(entry.addr_), static_cast<uint64_t>(entry.size_),
       raw_stream(entry.stream_));
}

}  // namespace

// 0: attached; 1: no recorder in this process (nothing attached); 2: the current allocator
// refused a tracker (not PyTorch's native one: a plug-in, cudaMallocAsync).
extern "C" int gpu_recorder_torch_attach() {
  const char* path = std::getenv("CUDA_INJECTION64_PATH");
  if (path == nullptr || *path == '\0') {
    return 1;
  }
  void* library = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
  if (library == nullptr) {
    return 1;
  }
  hook = reinterpret_cast<Hook>(dlsym(library, "gpu_recorder_block"));
  if (hook == nullptr) {
    return 1;
  }
  try {
    c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker(
        [](const auto& entry) { track(entry); });
  } catch (const std::exception&) {
    return 2;
  }
  return 0;
}
