// The recorder's test program on a GPU: every kind of stream/event call a real program makes,
// through the CUDA runtime API, checked by gpu-trace-check on the recorded trace.
//   variants           the calls (legacy and per-thread default streams, ...WithFlags,
//                      cudaLaunchKernelEx, a cooperative launch, a host function, stream-ordered
//                      memory, an event re-recorded, stream capture with a joined stream and
//                      graph launches, four threads, a query of pending work) and an exit that
//                      leaves one stream and one event alive;
//   variants loop N    N empty-kernel launches on one stream (the launch-bound loop), timed.
// Built twice: plain, and with --default-stream per-thread (the _ptsz forms).
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#define CHECK(call)                                                                  \
  do {                                                                               \
    cudaError_t err_ = (call);                                                       \
    if (err_ != cudaSuccess) {                                                       \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call,              \
                   cudaGetErrorString(err_));                                        \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

__global__ void add_one(int* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1;
}

__global__ void empty() {}

__global__ void spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

static void host_fn(void* flag) { *static_cast<int*>(flag) = 1; }

static int launch_loop(long n) {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  empty<<<1, 1, 0, s>>>();
  CHECK(cudaStreamSynchronize(s));
  auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) empty<<<1, 1, 0, s>>>();
  CHECK(cudaStreamSynchronize(s));
  double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  std::printf("launch_loop: %ld launches, %.1f ns per launch\n", n, ns / n);
  CHECK(cudaStreamDestroy(s));
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "loop") == 0) return launch_loop(std::atol(argv[2]));
  const int n = 1 << 16;
  int* x;
  CHECK(cudaMalloc(&x, n * sizeof(int)));
  CHECK(cudaMemset(x, 0, n * sizeof(int)));

  // A stream and an event of the program's own; the legacy default stream waits on it.
  cudaStream_t s1;
  cudaEvent_t e1;
  CHECK(cudaStreamCreate(&s1));
  CHECK(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming));
  add_one<<<n / 256, 256, 0, s1>>>(x, n);
  CHECK(cudaEventRecordWithFlags(e1, s1, cudaEventRecordDefault));
  CHECK(cudaStreamWaitEvent(0, e1, 0));
  add_one<<<n / 256, 256>>>(x, n);  // the default stream (legacy, or per-thread when built so)
  add_one<<<n / 256, 256, 0, cudaStreamPerThread>>>(x, n);
  add_one<<<n / 256, 256, 0, cudaStreamLegacy>>>(x, n);

  // An event re-recorded many times, each record waited on by another stream.
  cudaStream_t s2;
  CHECK(cudaStreamCreateWithPriority(&s2, cudaStreamNonBlocking, 0));
  for (int i = 0; i < 100; ++i) {
    add_one<<<n / 256, 256, 0, s1>>>(x, n);
    CHECK(cudaEventRecord(e1, s1));
    CHECK(cudaStreamWaitEvent(s2, e1, 0));
  }

  // Launch variants, copies and stream-ordered memory.
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(n / 256);
  config.blockDim = dim3(256);
  config.stream = s2;
  CHECK(cudaLaunchKernelEx(&config, add_one, x, n));
  void* args[] = {&x, const_cast<int*>(&n)};
  CHECK(cudaLaunchCooperativeKernel((void*)add_one, dim3(4), dim3(256), args, 0, s2));
  int flag = 0;
  CHECK(cudaLaunchHostFunc(s2, host_fn, &flag));
  int* y;
  CHECK(cudaMallocAsync(&y, n * sizeof(int), s2));
  CHECK(cudaMemcpyAsync(y, x, n * sizeof(int), cudaMemcpyDeviceToDevice, s2));
  CHECK(cudaMemsetAsync(y, 0, n * sizeof(int), s2));
  CHECK(cudaFreeAsync(y, s2));
  std::vector<int> host(n);
  CHECK(cudaMemcpyAsync(host.data(), x, n * sizeof(int), cudaMemcpyDeviceToHost, s2));

  // A query of pending work (CUDA_ERROR_NOT_READY is not a failure).
  spin<<<1, 1, 0, s1>>>(50000000);
  cudaError_t q = cudaStreamQuery(s1);
  std::printf("query of a busy stream: %s\n", cudaGetErrorName(q));
  CHECK(cudaStreamSynchronize(s1));
  CHECK(cudaStreamSynchronize(s2));
  CHECK(cudaEventSynchronize(e1));
  CHECK(cudaEventQuery(e1));

  // Stream capture: s3 captures, s4 joins through a fork event and rejoins; the graph runs
  // three times on s1. Captured calls are not executed.
  cudaStream_t s3, s4;
  cudaEvent_t fork, join;
  CHECK(cudaStreamCreateWithFlags(&s3, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s4, cudaStreamNonBlocking));
  CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(s3, cudaStreamCaptureModeGlobal));
  add_one<<<n / 256, 256, 0, s3>>>(x, n);
  CHECK(cudaEventRecord(fork, s3));
  CHECK(cudaStreamWaitEvent(s4, fork, 0));
  add_one<<<n / 256, 256, 0, s4>>>(x, n);
  CHECK(cudaEventRecord(join, s4));
  CHECK(cudaStreamWaitEvent(s3, join, 0));
  CHECK(cudaStreamEndCapture(s3, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) CHECK(cudaGraphLaunch(exec, s1));
  CHECK(cudaStreamSynchronize(s1));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));

  // Four threads, each with a stream and an event of its own; the main thread waits on theirs.
  std::vector<cudaEvent_t> done(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      cudaStream_t s;
      CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      CHECK(cudaEventCreateWithFlags(&done[t], cudaEventDisableTiming));
      for (int i = 0; i < 50; ++i) add_one<<<n / 256, 256, 0, s>>>(x, n);
      add_one<<<1, 1>>>(x, 1);  // this thread's default stream
      CHECK(cudaEventRecord(done[t], s));
      CHECK(cudaStreamSynchronize(s));
      CHECK(cudaStreamDestroy(s));
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < 4; ++t) {
    CHECK(cudaStreamWaitEvent(s2, done[t], 0));
    CHECK(cudaEventDestroy(done[t]));
  }
  CHECK(cudaStreamSynchronize(s2));

  // Several devices, where there are.
  int devices = 0;
  CHECK(cudaGetDeviceCount(&devices));
  for (int d = 1; d < devices; ++d) {
    CHECK(cudaSetDevice(d));
    cudaStream_t sd;
    CHECK(cudaStreamCreate(&sd));
    empty<<<1, 1, 0, sd>>>();
    CHECK(cudaStreamSynchronize(sd));
    CHECK(cudaStreamDestroy(sd));
  }
  CHECK(cudaSetDevice(0));

  CHECK(cudaStreamDestroy(s2));
  CHECK(cudaStreamDestroy(s3));
  CHECK(cudaStreamDestroy(s4));
  CHECK(cudaEventDestroy(fork));
  CHECK(cudaEventDestroy(join));
  CHECK(cudaFree(x));
  std::printf("variants: done on %d device(s), host function ran: %d\n", devices, flag);
  // s1 and e1 stay alive: the process exits without destroying them.
  return 0;
}
