/* The host's side of the multi-GPU block pipeline alone, no kernels: G GPUs
 * each bring blocks of doubles (5400 x 5400, column-major, as a 5e4 pdist
 * on 4 GPUs) down into page-locked staging in 2 MiB pages (as the device
 * layer's), and a team of cores / G threads per GPU writes each column into
 * one fresh result that asks for 2 MiB pages (as R's result, written once).
 * The teams all write at once, where the pipeline's take turns as their
 * GPUs deliver: its time sizes the host's share of such a call, it is no
 * floor for it (inst/bench/RESULTS.md, "Distributed and multi-GPU").
 *
 * Pieces: 0 brings each block down whole into one of two block-sized slots
 * (as the pipeline does); P > 0 brings it down in pieces of P MiB of whole
 * columns into a ring of small slots (RING, 4 by default), each written out
 * as it lands, while it may still be in the host's cache. Blocks go to the
 * GPUs in turn.
 *
 * STAGING=shm puts the staging in shared memory (memfd, 4 KiB pages where
 * the system gives shared memory no 2 MiB ones) instead of private 2 MiB
 * pages: the rate of a route where future workers bring blocks down into
 * slots their caller maps and the caller writes them into its result, as
 * the in-process pipeline does. Not part of the package's build:
 *   nvcc -O3 -Xcompiler -fopenmp inst/bench/scatter_rate.cu -o /tmp/scatter_rate
 *   [STAGING=shm] REPS=5 /tmp/scatter_rate GPUS GB [P MiB ...]
 */
#include <cuda_runtime.h>
#include <sys/mman.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#define CHECK(x)                                                                   \
  do {                                                                             \
    cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                       \
      fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                     \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

static double now()
{
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

const size_t kRows = 5400, kCols = 5400;
// Columns lie apart in the result, as in a `dist`: one copy per column.
const size_t kColumnStride = kRows + 7, kBlockStride = kCols * kColumnStride;
const size_t kColumnBytes = kRows * sizeof(double), kBlockBytes = kCols * kColumnBytes;

struct gpu_run {
  int device, gpus, threads;
  size_t piece_cols, ring;   // columns per download, slots they rotate through
  double *block;             // on the GPU: the block every download reads
  char *staging;             // page-locked: two blocks' worth
  std::vector<cudaEvent_t> landed;
  cudaStream_t stream;
  double *result;
  size_t n_blocks;
};

static void write_columns(double *block_out, const double *piece, size_t c0, size_t c1,
                          int threads)
{
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (long long c = (long long) c0; c < (long long) c1; c++) {
    const double *from = piece + (size_t) (c - (long long) c0) * kRows;
    double *to = block_out + (size_t) c * kColumnStride;
    for (size_t i = 0; i < kRows; i++) to[i] = from[i];
  }
}

static void run(gpu_run *g)
{
  CHECK(cudaSetDevice(g->device));
  size_t per_block = (kCols + g->piece_cols - 1) / g->piece_cols;
  std::vector<size_t> pieces;   // block * per_block + piece, this GPU's in order
  for (size_t b = (size_t) g->device; b < g->n_blocks; b += (size_t) g->gpus)
    for (size_t p = 0; p < per_block; p++) pieces.push_back(b * per_block + p);
  size_t slot_bytes = g->piece_cols * kColumnBytes;
  auto columns = [&](size_t i, size_t *c0, size_t *c1) {
    *c0 = pieces[i] % per_block * g->piece_cols;
    *c1 = std::min(kCols, *c0 + g->piece_cols);
  };
  auto download = [&](size_t i) {
    size_t c0, c1;
    columns(i, &c0, &c1);
    CHECK(cudaMemcpyAsync(g->staging + i % g->ring * slot_bytes, g->block + c0 * kRows,
                          (c1 - c0) * kColumnBytes, cudaMemcpyDeviceToHost, g->stream));
    CHECK(cudaEventRecord(g->landed[i % g->ring], g->stream));
  };
  for (size_t i = 0; i < pieces.size() && i < g->ring; i++) download(i);
  for (size_t i = 0; i < pieces.size(); i++) {
    size_t c0, c1;
    columns(i, &c0, &c1);
    CHECK(cudaEventSynchronize(g->landed[i % g->ring]));
    write_columns(g->result + pieces[i] / per_block * kBlockStride,
                  (const double *) (g->staging + i % g->ring * slot_bytes), c0, c1, g->threads);
    if (i + g->ring < pieces.size()) download(i + g->ring);
  }
}

// Two blocks of staging, its pages made: private memory in 2 MiB pages, or
// shared memory (a memfd, as one process's slots mapped by another).
static void *make_staging(size_t bytes, bool shared)
{
  void *p = NULL;
  if (shared) {
    int fd = memfd_create("staging", 0);
    if (fd < 0) return NULL;
    bool sized = ftruncate(fd, (off_t) bytes) == 0;
    p = sized ? mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    close(fd);
    if (p == MAP_FAILED) return NULL;
  } else if (posix_memalign(&p, (size_t) 2 << 20, bytes)) {
    return NULL;
  }
  madvise(p, bytes, MADV_HUGEPAGE);
  memset(p, 1, bytes);
  return p;
}

int main(int argc, char **argv)
{
  bool shared = getenv("STAGING") && !strcmp(getenv("STAGING"), "shm");
  int gpus = argc > 1 ? atoi(argv[1]) : 1, reps = getenv("REPS") ? atoi(getenv("REPS")) : 4;
  double gb = argc > 2 ? atof(argv[2]) : 10;
  size_t ring_most = getenv("RING") ? (size_t) atol(getenv("RING")) : 4;
  int threads = std::max(1, (int) std::thread::hardware_concurrency() / gpus);
  size_t n_blocks = (size_t) (gb * 1e9 / kBlockBytes);
  size_t result_bytes = n_blocks * kBlockStride * sizeof(double);
  std::vector<size_t> piece_mib = {0};
  for (int a = 3; a < argc; a++) piece_mib.push_back((size_t) atol(argv[a]));
  std::vector<gpu_run> g((size_t) gpus);
  for (int d = 0; d < gpus; d++) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaMalloc(&g[d].block, kBlockBytes));
    CHECK(cudaMemset(g[d].block, 0x3f, kBlockBytes));
    void *staging = make_staging(2 * kBlockBytes, shared);
    if (!staging) return 1;
    double t_register = now();
    CHECK(cudaHostRegister(staging, 2 * kBlockBytes, cudaHostRegisterPortable));
    printf("GPU %d: staging registered in %.3f s\n", d, now() - t_register);
    g[d].staging = (char *) staging;
    CHECK(cudaStreamCreateWithFlags(&g[d].stream, cudaStreamNonBlocking));
    g[d].landed.resize(64);
    for (cudaEvent_t &e : g[d].landed)
      CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    g[d].device = d;
    g[d].gpus = gpus;
    g[d].threads = threads;
    g[d].n_blocks = n_blocks;
    CHECK(cudaDeviceSynchronize());
  }
  printf("%d GPUs, %d threads each, %zu blocks of %.0f MB, result %.2f GB, %s staging\n", gpus,
         threads, n_blocks, kBlockBytes / 1e6, result_bytes / 1e9, shared ? "shared" : "private");
  printf("%10s %4s %8s %8s\n", "piece_MiB", "rep", "s", "GB/s");
  for (int rep = 0; rep < reps; rep++) {
    for (size_t mib : piece_mib) {
      void *result = mmap(NULL, result_bytes, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (result == MAP_FAILED) return 1;
      madvise(result, result_bytes, MADV_HUGEPAGE);
      for (gpu_run &x : g) {
        x.result = (double *) result;
        x.piece_cols = mib ? std::max((size_t) 1, (mib << 20) / kColumnBytes) : kCols;
        x.ring = mib ? std::min(ring_most, kCols / x.piece_cols * 2) : 2;
        x.ring = std::max((size_t) 1, std::min(x.ring, x.landed.size()));
      }
      double t0 = now();
      std::vector<std::thread> team;
      for (gpu_run &x : g) team.emplace_back(run, &x);
      for (std::thread &t : team) t.join();
      double t = now() - t0;
      munmap(result, result_bytes);
      printf("%10zu %4d %8.3f %8.1f\n", mib, rep, t, n_blocks * kBlockBytes / t / 1e9);
      fflush(stdout);
    }
  }
  return 0;
}
