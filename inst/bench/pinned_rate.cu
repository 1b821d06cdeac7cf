/* Time to get page-locked host memory, by way (the device layer's
 * gk_pinned_alloc, inst/bench/RESULTS.md): cudaMallocHost, against memory of
 * our own, faulted in (one thread, or in 2 MiB pages asked for with
 * MADV_HUGEPAGE) then registered. Fresh memory each time. Not part of the
 * package's build:
 *   nvcc -O2 inst/bench/pinned_rate.cu -o /tmp/pinned_rate && /tmp/pinned_rate MiB
 */
#include <cuda_runtime.h>
#include <sys/mman.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

static double now()
{
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char **argv)
{
  const size_t mib = argc > 1 ? (size_t) atol(argv[1]) : 1024, bytes = mib << 20;
  const size_t huge = (size_t) 2 << 20;
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
      if (posix_memalign(&p, huge, bytes)) return 1;
      if (large) madvise(p, bytes, MADV_HUGEPAGE);
      memset(p, 1, bytes);
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
  return 0;
}
