/* Time to get page-locked host memory, by way (the device layer's
 * gk_pinned_alloc, inst/bench/RESULTS.md): cudaMallocHost, against memory of
 * our own, faulted in (one thread, or in 2 MiB pages asked for with
 * MADV_HUGEPAGE) then registered. Fresh memory each time. Then, on a machine
 * of several GPUs, the same registration once every GPU has a context (as in
 * a call on all of them: registered memory is mapped into each), and one
 * buffer per GPU registered by a thread each. Not part of the
 * package's build:
 *   nvcc -O2 inst/bench/pinned_rate.cu -o /tmp/pinned_rate && /tmp/pinned_rate MiB
 */
#include <cuda_runtime.h>
#include <sys/mman.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

static double now()
{
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Memory of our own, on a 2 MiB boundary, in 2 MiB pages where `large` asks
// for them, every page written.
static void *own_memory(size_t bytes, int large)
{
  void *p = NULL;
  if (posix_memalign(&p, (size_t) 2 << 20, bytes)) exit(1);
  if (large) madvise(p, bytes, MADV_HUGEPAGE);
  memset(p, 1, bytes);
  return p;
}

int main(int argc, char **argv)
{
  const size_t mib = argc > 1 ? (size_t) atol(argv[1]) : 1024, bytes = mib << 20;
  cudaFree(0);   // the context, not what is measured
  printf("%8s %-34s %8s %8s %8s\n", "MiB", "way", "make s", "pin s", "GB/s");
  for (int round = 0; round < 2; round++) {
    void *p = NULL;
    double t = now();
    if (cudaMallocHost(&p, bytes) != cudaSuccess) return 1;
    double pin = now() - t;
    cudaFreeHost(p);
    printf("%8zu %-34s %8s %8.3f %8.1f\n", mib, "cudaMallocHost", "", pin, bytes / pin / 1e9);
    for (int large = 0; large < 2; large++) {
      t = now();
      p = own_memory(bytes, large);
      double make = now() - t;
      t = now();
      cudaError_t code = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
      pin = now() - t;
      cudaHostUnregister(p);
      free(p);
      if (code != cudaSuccess) return 1;
      printf("%8zu %-34s %8.3f %8.3f %8.1f\n", mib,
             large ? "2 MiB pages, written, registered" : "4 KiB pages, written, registered",
             make, pin, bytes / (make + pin) / 1e9);
    }
  }
  int gpus = 0;
  cudaGetDeviceCount(&gpus);
  if (gpus < 2) return 0;
  for (int d = 0; d < gpus; d++) {
    cudaSetDevice(d);
    cudaFree(0);
  }
  cudaSetDevice(0);
  for (int round = 0; round < 2; round++) {
    void *p = own_memory(bytes, 1);
    double t = now();
    cudaError_t code = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
    double one = now() - t;
    cudaHostUnregister(p);
    free(p);
    if (code != cudaSuccess) return 1;
    std::vector<void *> each(gpus);
    std::vector<cudaError_t> codes(gpus, cudaSuccess);
    for (auto &q : each) q = own_memory(bytes, 1);
    std::vector<std::thread> threads;
    t = now();
    for (int d = 0; d < gpus; d++)
      threads.emplace_back([&each, &codes, d, bytes] {
        cudaSetDevice(d);
        codes[d] = cudaHostRegister(each[d], bytes, cudaHostRegisterPortable);
      });
    for (auto &th : threads) th.join();
    double all = now() - t;
    for (int d = 0; d < gpus; d++) {
      if (codes[d] == cudaSuccess) cudaHostUnregister(each[d]);
      free(each[d]);
    }
    for (cudaError_t c : codes)
      if (c != cudaSuccess) return 1;
    printf("%8zu %d contexts: one registered in %.3f s; one per GPU, a thread each, in %.3f s\n",
           mib, gpus, one, all);
  }
  return 0;
}
