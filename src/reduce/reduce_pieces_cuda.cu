// The block-sparse work of the GPU reductions (reduce_cuda.cuh): the pieces
// cut from a call's ranges, sorted heaviest first, and the plan that keeps
// them on the device for the next calls with the same ranges.
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <utility>
#include <vector>
#include "reduce/reduce_cuda.cuh"
#include "device/gk_device.h"

namespace reduce_gpu {

// Two-way pieces (symmetric sums, reduce_kernels.cuh): each piece's own
// list, clipped to j >= its first row; the pairs before it are those of
// earlier pieces, which evaluate them for both.
gk_status HostPieces::clip(gk_error *err)
{
  size_t total = 0;
  for (int p = 0; p < count; p++) total += (size_t) (data[4 * p + 3] - data[4 * p + 2]);
  if (total > (size_t) INT_MAX)
    return gk_fail(err, GK_ERR_INPUT, "too many block-sparse ranges for a symmetric reduction");
  clipped = (int *) malloc((2 * total + 1) * sizeof(int));
  if (!clipped) return gk_fail(err, GK_ERR_NOMEM, "out of memory for the block-sparse work list");
  int at = 0;
  for (int p = 0; p < count; p++) {
    int *piece = data + 4 * p;
    const int first = at;
    for (int l = piece[2]; l < piece[3]; l++) {
      const int s = red[2 * l] > piece[0] ? red[2 * l] : piece[0], e = red[2 * l + 1];
      if (e <= s) continue;
      clipped[2 * at] = s;
      clipped[2 * at + 1] = e;
      at++;
    }
    piece[2] = first;
    piece[3] = at;
  }
  red = clipped;
  nred = (size_t) at;
  return GK_OK;
}
gk_status HostPieces::build(const gk_reduce_ranges *r, size_t m, int max_rows, bool two_way, gk_error *err)
{
  if (reduce_ranges_pieces(r, m, max_rows, &data, &count, err)) return err->status;
  red = r->redranges_j;
  nred = r->count_i > 0 ? (size_t) r->slices_i[r->count_i - 1] : 0;
  if (two_way && clip(err)) return err->status;
  std::vector<std::pair<double, int>> work;   // (pairs, piece)
  std::vector<int> sorted;
  try {
    work.resize((size_t) count);
    sorted.resize((size_t) count * 4);
  } catch (...) {
    return gk_fail(err, GK_ERR_NOMEM, "out of memory for the block-sparse work list");
  }
  for (int p = 0; p < count; p++) {
    size_t len = 0;
    for (int l = data[4 * p + 2]; l < data[4 * p + 3]; l++) len += (size_t) (red[2 * l + 1] - red[2 * l]);
    if (len > list_max) list_max = len;
    work[p] = std::make_pair((double) len * (data[4 * p + 1] - data[4 * p]), p);
    pairs += work[p].first;
  }
  // Heaviest pieces first (blocks start in grid order): the last wave then
  // holds the light ones, instead of a long list starting last.
  std::stable_sort(work.begin(), work.end(),
                   [](const std::pair<double, int> &u, const std::pair<double, int> &v) {
                     return u.first > v.first;
                   });
  for (int p = 0; p < count; p++) memcpy(&sorted[4 * (size_t) p], data + 4 * work[p].second, 4 * sizeof(int));
  if (count) memcpy(data, sorted.data(), sorted.size() * sizeof(int));
  return GK_OK;
}
// Every row reduces over all of [0, n): the dense reduction (an all-true
// mask over clusters that cover the points) takes the dense path.
bool HostPieces::is_dense(const gk_reduce_ranges *r, size_t n) const
{
  for (int p = 0; p < count; p++) {
    const int *piece = data + 4 * p;
    if (piece[3] - piece[2] != 1 || r->redranges_j[2 * piece[2]] != 0 ||
        (size_t) r->redranges_j[2 * piece[2] + 1] != n)
      return false;
  }
  return true;
}
HostPieces::~HostPieces()
{
  free(data);
  free(clipped);
}

// Fills `plan` with the pieces just cut (sorted, on the host) and the reduced
// ranges, uploaded once into the plan's own buffer.
gk_status keep_plan(gk_reduce_plan *plan, const HostPieces &pieces, bool two_way, size_t m,
                    size_t n, double kept_pairs, int piece_rows, gk_error *err)
{
  reduce_plan_free(plan);
  const size_t bytes = pieces.bytes() + pieces.redrange_bytes();
  if (pieces.count) {
    char *host = (char *) malloc(bytes);
    if (!host) return gk_fail(err, GK_ERR_NOMEM, "out of host memory for the block-sparse plan");
    memcpy(host, pieces.data, pieces.bytes());
    memcpy(host + pieces.bytes(), pieces.red, pieces.redrange_bytes());
    gk_status st = gk_buffer_alloc(&plan->buf, bytes, "the block-sparse plan", err);
    if (st == GK_OK) st = gk_buffer_upload(&plan->buf, host, bytes, NULL, err);
    free(host);
    if (st) {
      reduce_plan_free(plan);
      return st;
    }
  }
  plan->made = 1;
  plan->m = m;
  plan->n = n;
  plan->kept_pairs = kept_pairs;
  plan->piece_rows = piece_rows;
  plan->npieces = pieces.count;
  plan->list_max = pieces.list_max;
  plan->symmetric = two_way;
  return GK_OK;
}

}  // namespace reduce_gpu

extern "C" void reduce_plan_free(gk_reduce_plan *plan)
{
  gk_buffer_free(&plan->buf);
  const gk_reduce_plan empty = GK_REDUCE_PLAN_EMPTY;
  *plan = empty;
}
