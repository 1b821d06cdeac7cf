// KMIN for any k on the GPU (reduce_kmin_large.cuh): a chunk of rows of x at
// a time, all F_ij of the chunk in a bounded buffer, every row sorted by CUB's
// stable radix sort, the first k kept. Costs O(m n) sorting work instead of
// the k-list's O(m n k / tile) insertions; used only where the k-lists stop.
#include <stdlib.h>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>
#include "reduce/reduce_kmin_large.cuh"
#include "gpukernels/reduce_kernels.cuh"
#include "device/gk_cuda.h"
#include "device/gk_hooks.h"
#include "device/gk_tunables.h"

namespace gkreduce {

namespace {

constexpr size_t BUFFER_BYTES_MAX = (size_t) 1 << 30;   // sort buffers per chunk
constexpr int MAX_CHUNK_ROWS = 65535;                     // gridDim.y of kmin_values
constexpr int SEGMENTED_MAX_N = 4096;   // one block sorts a row this long quickly

// F_ij of rows i0 .. i0 + gridDim.y - 1 against every j: row r of the chunk
// fills keys[r n .. r n + n) in increasing j (vals: j), and offsets[r] = r n.
// The statistic is pair_stat's arithmetic with x and y swapped (the same bits:
// (-t)^2 = t^2 and fma(y, x, s) = fma(x, y, s)), so values match the k-lists.
template <typename T>
__global__ void kmin_values(Args a, size_t i0, T *keys, int *vals, int *offsets)
{
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T *xi = reinterpret_cast<T *>(smem_raw);
  const T *x = static_cast<const T *>(a.x);
  const T *y = static_cast<const T *>(a.y);
  const size_t r = blockIdx.y, n = a.n;
  for (int d = threadIdx.x; d < a.dim; d += blockDim.x) xi[d] = x[i0 + r + (size_t) d * a.m];
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    offsets[r] = (int) (r * n);
    if (r + 1 == gridDim.y) offsets[r + 1] = (int) ((r + 1) * n);
  }
  __syncthreads();
  for (size_t j = (size_t) blockIdx.x * blockDim.x + threadIdx.x; j < n;
       j += (size_t) gridDim.x * blockDim.x) {
    T s = pair_stat<T, 0, true>(nullptr, y + j, n, xi, a.dim, a.inner != 0);
    keys[r * n + j] = ValKernel::eval(s, a);
    vals[r * n + j] = (int) j;
  }
}

// The first k of each sorted row (rows of length n) to rows i0 .. of the
// results (column-major m x k, values finished as a asks; indices 1-based).
template <typename T>
__global__ void kmin_keep(const T *keys, const int *vals, size_t n, int rows, int k, size_t i0,
                          size_t m, Args a, double *out, int *index)
{
  const size_t count = (size_t) rows * k;
  for (size_t t = (size_t) blockIdx.x * blockDim.x + threadIdx.x; t < count;
       t += (size_t) gridDim.x * blockDim.x) {
    const size_t q = t / rows, r = t % rows;
    out[i0 + r + q * m] = finished((double) keys[r * n + q], a);
    index[i0 + r + q * m] = vals[r * n + q] + 1;
  }
}

unsigned grid_for(size_t work)
{
  size_t blocks = (work + 255) / 256;
  return (unsigned) (blocks < 1 ? 1 : blocks > 8192 ? 8192 : blocks);
}

}  // namespace

template <typename T>
gk_status kmin_large(const Args &a, gk_error *err)
{
  const size_t m = a.m, n = a.n;
  const int k = a.k;
  if (m == 0) return GK_OK;
  if (n > (size_t) 0x7fffffff / 2)
    return gk_fail(err, GK_ERR_INPUT, "k = %d nearest among %.0f points is beyond the GPU "
                   "engine's sort (at most %d points); use backend = \"cpu\"", k, (double) n,
                   0x7fffffff / 2);
  // Elements per chunk: within half the memory budget and BUFFER_BYTES_MAX;
  // the tunable GK_KMIN_LARGE_ELEMENTS overrides it (tests: several chunks).
  const size_t per_element = 2 * (sizeof(T) + sizeof(int));
  size_t budget = 0;
  if (gk_device_memory_budget(&budget, err)) return err->status;
  size_t elements = (budget / 2 < BUFFER_BYTES_MAX ? budget / 2 : BUFFER_BYTES_MAX) / per_element;
  const double forced = gk_tunable(GK_TUNE_KMIN_LARGE_ELEMENTS);
  if (forced >= 1) elements = (size_t) forced;
  if (elements < n) elements = n;   // one row at least (the scratch checks the budget)
  size_t rows = elements / n;
  if (rows > m) rows = m;
  if (rows > (size_t) MAX_CHUNK_ROWS) rows = MAX_CHUNK_ROWS;
  if (rows * n > (size_t) 0x7fffffff) rows = (size_t) 0x7fffffff / n;
  // Many rows, or short ones: one segmented sort per chunk (a block per row).
  // Few long rows: one device-wide sort per row, which uses the whole GPU.
  const bool segmented = rows >= (size_t) gk_device_sm_count() || n <= (size_t) SEGMENTED_MAX_N;

  size_t temp_bytes = 0;
  cub::DoubleBuffer<T> keys(nullptr, nullptr);
  cub::DoubleBuffer<int> vals(nullptr, nullptr);
  cudaError_t code = segmented
    ? cub::DeviceSegmentedRadixSort::SortPairs(nullptr, temp_bytes, keys, vals, (int) (rows * n),
                                               (int) rows, (const int *) nullptr,
                                               (const int *) nullptr)
    : cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys, vals, (int) n);
  if (gk_cuda_status(code, "sizing the sort of the k smallest values", err)) return err->status;

  const size_t items = rows * n;
  auto aligned = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  const size_t key_bytes = aligned(items * sizeof(T)), val_bytes = aligned(items * sizeof(int));
  const size_t offset_bytes = aligned((rows + 1) * sizeof(int));
  void *scratch = NULL;
  if (gk_device_scratch(GK_SCRATCH_PARTIALS,
                        2 * key_bytes + 2 * val_bytes + offset_bytes + temp_bytes,
                        "the buffers of the k smallest values (large k)", &scratch, err))
    return err->status;
  char *p = (char *) scratch;
  T *keys0 = (T *) p, *keys1 = (T *) (p + key_bytes);
  int *vals0 = (int *) (p + 2 * key_bytes), *vals1 = (int *) (p + 2 * key_bytes + val_bytes);
  int *offsets = (int *) (p + 2 * key_bytes + 2 * val_bytes);
  void *temp = p + 2 * key_bytes + 2 * val_bytes + offset_bytes;

  const size_t smem = (size_t) a.dim * sizeof(T);
  for (size_t i0 = 0; i0 < m; i0 += rows) {
    const int chunk = (int) (m - i0 < rows ? m - i0 : rows);
    kmin_values<T><<<dim3(grid_for(n), (unsigned) chunk), 256, smem>>>(a, i0, keys0, vals0, offsets);
    if (gk_cuda_check_launch("the values of the k smallest (large k)", err)) return err->status;
    if (segmented) {
      cub::DoubleBuffer<T> kb(keys0, keys1);
      cub::DoubleBuffer<int> vb(vals0, vals1);
      size_t bytes = temp_bytes;
      code = cub::DeviceSegmentedRadixSort::SortPairs(temp, bytes, kb, vb, (int) ((size_t) chunk * n),
                                                      chunk, offsets, offsets + 1);
      if (gk_cuda_status(code, "sorting the rows (large k)", err)) return err->status;
      kmin_keep<T><<<grid_for((size_t) chunk * k), 256>>>(kb.Current(), vb.Current(), n, chunk, k,
                                                          i0, m, a, a.out, a.index);
      if (gk_cuda_check_launch("keeping the k smallest (large k)", err)) return err->status;
    } else {
      for (int r = 0; r < chunk; r++) {
        cub::DoubleBuffer<T> kb(keys0 + (size_t) r * n, keys1 + (size_t) r * n);
        cub::DoubleBuffer<int> vb(vals0 + (size_t) r * n, vals1 + (size_t) r * n);
        size_t bytes = temp_bytes;
        code = cub::DeviceRadixSort::SortPairs(temp, bytes, kb, vb, (int) n);
        if (gk_cuda_status(code, "sorting a row (large k)", err)) return err->status;
        kmin_keep<T><<<grid_for((size_t) k), 256>>>(kb.Current(), vb.Current(), n, 1, k, i0 + r, m,
                                                    a, a.out, a.index);
        if (gk_cuda_check_launch("keeping the k smallest (large k)", err)) return err->status;
      }
    }
    if (i0 + rows < m) {
      // Between chunks: let the user stop a long call.
      if (gk_stream_sync(NULL, "the k smallest values (large k)", err)) return err->status;
      if (gk_interrupt_pending())
        return gk_fail(err, GK_ERR_INTERRUPTED, "the reduction was interrupted");
    }
  }
  return GK_OK;
}

template gk_status kmin_large<float>(const Args &a, gk_error *err);
template gk_status kmin_large<double>(const Args &a, gk_error *err);

}  // namespace gkreduce
