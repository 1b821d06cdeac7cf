/*
 * Block-sparse ranges of the reductions (layout in reduce.h): checking a
 * caller's arrays, building both sets from kept cluster pairs, and cutting
 * the rows into the pieces both engines work on. Host C, no R.
 */
#include <stdlib.h>
#include <string.h>
#include "reduce/reduce.h"

/* Pairs (start, end) within [0, limit), each start <= end, sorted and not
 * overlapping. `what` names the array in messages. */
static gk_status check_pairs(const int *pairs, int count, size_t limit, const char *what,
                             int list, gk_error *err)
{
  long long previous_end = 0;
  for (int q = 0; q < count; q++) {
    long long s = pairs[2 * q], e = pairs[2 * q + 1];
    if (s < 0 || e < s || (size_t) e > limit) {
      if (list >= 0)
        return gk_fail(err, GK_ERR_INPUT, "%s: range %d of the list of cluster %d is [%lld, %lld), "
                       "not a range inside [0, %zu)", what, q + 1, list + 1, s, e, limit);
      return gk_fail(err, GK_ERR_INPUT, "%s: range %d is [%lld, %lld), not a range inside [0, %zu)",
                     what, q + 1, s, e, limit);
    }
    if (s < previous_end) {
      if (list >= 0)
        return gk_fail(err, GK_ERR_INPUT, "%s: the list of cluster %d is not sorted or overlaps "
                       "(range %d starts at %lld, before the previous one ends at %lld)",
                       what, list + 1, q + 1, s, previous_end);
      return gk_fail(err, GK_ERR_INPUT, "%s: ranges are not sorted or overlap (range %d starts at "
                     "%lld, before the previous one ends at %lld)", what, q + 1, s, previous_end);
    }
    if (e > s) previous_end = e;
  }
  return GK_OK;
}

gk_status reduce_ranges_check(const gk_reduce_ranges *r, size_t m, size_t n, gk_error *err)
{
  if (r->count_i < 0 || (r->count_i > 0 && (!r->ranges_i || !r->slices_i)))
    return gk_fail(err, GK_ERR_INPUT, "block-sparse ranges: %d clusters of output rows without their arrays",
                   r->count_i);
  if (check_pairs(r->ranges_i, r->count_i, m, "block-sparse ranges of the output rows", -1, err))
    return err->status;
  int from = 0;
  for (int q = 0; q < r->count_i; q++) {
    int to = r->slices_i[q];
    if (to < from)
      return gk_fail(err, GK_ERR_INPUT, "block-sparse slices decrease at cluster %d (%d after %d)",
                     q + 1, to, from);
    if (to > from && !r->redranges_j)
      return gk_fail(err, GK_ERR_INPUT, "block-sparse ranges: the reduced ranges are missing");
    if (check_pairs(r->redranges_j + 2 * (size_t) from, to - from, n,
                    "block-sparse ranges of the reduced rows", q, err))
      return err->status;
    from = to;
  }
  return GK_OK;
}

gk_reduce_ranges reduce_ranges_transpose(const gk_reduce_ranges *r)
{
  gk_reduce_ranges t;
  t.count_i = r->count_j;
  t.ranges_i = r->ranges_j;
  t.slices_i = r->slices_j;
  t.redranges_j = r->redranges_i;
  t.count_j = r->count_i;
  t.ranges_j = r->ranges_i;
  t.slices_j = r->slices_i;
  t.redranges_i = r->redranges_j;
  return t;
}

double reduce_ranges_pairs(const gk_reduce_ranges *r)
{
  double total = 0.0;
  int from = 0;
  for (int q = 0; q < r->count_i; q++) {
    double cols = 0.0;
    for (int l = from; l < r->slices_i[q]; l++) cols += r->redranges_j[2 * l + 1] - r->redranges_j[2 * l];
    total += cols * (r->ranges_i[2 * q + 1] - r->ranges_i[2 * q]);
    from = r->slices_i[q];
  }
  return total;
}

double reduce_ranges_pairs_symmetric(const gk_reduce_ranges *r)
{
  double total = 0.0;
  int from = 0;
  for (int q = 0; q < r->count_i; q++) {
    const int first = r->ranges_i[2 * q];
    double cols = 0.0;
    for (int l = from; l < r->slices_i[q]; l++) {
      const int s = r->redranges_j[2 * l] > first ? r->redranges_j[2 * l] : first;
      if (r->redranges_j[2 * l + 1] > s) cols += r->redranges_j[2 * l + 1] - s;
    }
    total += cols * (r->ranges_i[2 * q + 1] - first);
    from = r->slices_i[q];
  }
  return total;
}

/* One direction: for each of `rows` clusters, the kept partner clusters in
 * increasing order (CSR in start/partner), written as merged ranges of the
 * partners' rows. Returns the number of ranges written to `red` (which has
 * room for npairs), and fills slices. */
static int write_lists(int rows, const size_t *start, const int *partner,
                       const int *partner_ranges, int *slices, int *red)
{
  int count = 0;
  for (int q = 0; q < rows; q++) {
    for (size_t p = start[q]; p < start[q + 1]; p++) {
      int c = partner[p];
      int s = partner_ranges[2 * c], e = partner_ranges[2 * c + 1];
      if (e <= s) continue;   // an empty cluster adds nothing
      if (count > (q == 0 ? 0 : slices[q - 1]) && red[2 * count - 1] == s) {
        red[2 * count - 1] = e;   // adjacent to the previous range: extend it
      } else {
        red[2 * count] = s;
        red[2 * count + 1] = e;
        count++;
      }
    }
    slices[q] = count;
  }
  return count;
}

/* CSR of the pairs grouped by `key` (kkey groups), partners sorted and
 * unique within a group: a counting sort by partner, then a stable one by key. */
static size_t group_pairs(int kkey, int kpartner, size_t npairs, const int *key,
                          const int *partner, size_t *start, int *out, int *tmp)
{
  size_t *count = (size_t *) calloc((size_t) (kpartner > kkey ? kpartner : kkey) + 1, sizeof(size_t));
  if (!count) return (size_t) -1;
  size_t *order = (size_t *) malloc((npairs + 1) * sizeof(size_t));
  if (!order) {
    free(count);
    return (size_t) -1;
  }
  for (size_t p = 0; p < npairs; p++) count[partner[p] + 1]++;
  for (int c = 0; c < kpartner; c++) count[c + 1] += count[c];
  for (size_t p = 0; p < npairs; p++) order[count[partner[p]]++] = p;
  memset(start, 0, ((size_t) kkey + 1) * sizeof(size_t));
  for (size_t p = 0; p < npairs; p++) start[key[p] + 1]++;
  for (int q = 0; q < kkey; q++) start[q + 1] += start[q];
  memcpy(count, start, ((size_t) kkey + 1) * sizeof(size_t));
  for (size_t t = 0; t < npairs; t++) {
    size_t p = order[t];
    tmp[count[key[p]]++] = partner[p];
  }
  // Drop repeats (partners are sorted within each group).
  size_t kept = 0;
  for (int q = 0; q < kkey; q++) {
    size_t from = start[q];
    start[q] = kept;
    for (size_t p = from; p < start[q + 1]; p++)
      if (p == from || tmp[p] != tmp[p - 1]) out[kept++] = tmp[p];
  }
  start[kkey] = kept;
  free(order);
  free(count);
  return kept;
}

gk_status reduce_ranges_build(int kx, const int *ranges_x, int ky, const int *ranges_y,
                              size_t npairs, const int *pair_x, const int *pair_y,
                              gk_reduce_ranges *out, int **storage, gk_error *err)
{
  *storage = NULL;
  memset(out, 0, sizeof *out);
  size_t limit_x = 0, limit_y = 0;
  for (int q = 0; q < kx; q++) if ((size_t) ranges_x[2 * q + 1] > limit_x) limit_x = ranges_x[2 * q + 1];
  for (int q = 0; q < ky; q++) if ((size_t) ranges_y[2 * q + 1] > limit_y) limit_y = ranges_y[2 * q + 1];
  if (check_pairs(ranges_x, kx, limit_x, "cluster ranges of x", -1, err) ||
      check_pairs(ranges_y, ky, limit_y, "cluster ranges of y", -1, err))
    return err->status;
  for (size_t p = 0; p < npairs; p++) {
    if (pair_x[p] < 0 || pair_x[p] >= kx || pair_y[p] < 0 || pair_y[p] >= ky)
      return gk_fail(err, GK_ERR_INPUT, "kept pair %zu is cluster (%d, %d), outside the %d x %d clusters",
                     p + 1, pair_x[p] + 1, pair_y[p] + 1, kx, ky);
  }
  // One allocation: ranges_i, slices_i, redranges_j, ranges_j, slices_j, redranges_i.
  size_t ints = 3 * (size_t) kx + 3 * (size_t) ky + 4 * npairs + 2;
  int *mem = (int *) malloc(ints * sizeof(int));
  size_t *start = (size_t *) malloc(((size_t) (kx > ky ? kx : ky) + 1) * sizeof(size_t));
  int *sorted = (int *) malloc((npairs + 1) * sizeof(int));
  int *tmp = (int *) malloc((npairs + 1) * sizeof(int));
  if (!mem || !start || !sorted || !tmp) {
    free(mem);
    free(start);
    free(sorted);
    free(tmp);
    return gk_fail(err, GK_ERR_NOMEM, "out of memory for block-sparse ranges of %zu cluster pairs", npairs);
  }
  int *ranges_i = mem, *slices_i = ranges_i + 2 * (size_t) kx, *red_j = slices_i + kx;
  size_t kept = group_pairs(kx, ky, npairs, pair_x, pair_y, start, sorted, tmp);
  int nred_j = 0, nred_i = 0;
  int *ranges_j = NULL, *slices_j = NULL, *red_i = NULL;
  if (kept != (size_t) -1) {
    memcpy(ranges_i, ranges_x, 2 * (size_t) kx * sizeof(int));
    nred_j = write_lists(kx, start, sorted, ranges_y, slices_i, red_j);
    ranges_j = red_j + 2 * (size_t) nred_j;
    slices_j = ranges_j + 2 * (size_t) ky;
    red_i = slices_j + ky;
    kept = group_pairs(ky, kx, npairs, pair_y, pair_x, start, sorted, tmp);
  }
  if (kept != (size_t) -1) {
    memcpy(ranges_j, ranges_y, 2 * (size_t) ky * sizeof(int));
    nred_i = write_lists(ky, start, sorted, ranges_x, slices_j, red_i);
  }
  free(start);
  free(sorted);
  free(tmp);
  if (kept == (size_t) -1) {
    free(mem);
    return gk_fail(err, GK_ERR_NOMEM, "out of memory for block-sparse ranges of %zu cluster pairs", npairs);
  }
  (void) nred_i;
  out->count_i = kx;
  out->ranges_i = ranges_i;
  out->slices_i = slices_i;
  out->redranges_j = red_j;
  out->count_j = ky;
  out->ranges_j = ranges_j;
  out->slices_j = slices_j;
  out->redranges_i = red_i;
  *storage = mem;
  return GK_OK;
}

/* Lists [a0, a1) and [b0, b1) of redranges hold the same ranges. */
static int same_list(const int *red, int a0, int a1, int b0, int b1)
{
  if (a1 - a0 != b1 - b0) return 0;
  return memcmp(red + 2 * (size_t) a0, red + 2 * (size_t) b0, 2 * (size_t) (a1 - a0) * sizeof(int)) == 0;
}

gk_status reduce_ranges_pieces(const gk_reduce_ranges *r, size_t m, int max_rows, int **pieces,
                               int *count, gk_error *err)
{
  *pieces = NULL;
  *count = 0;
  // Runs of rows with one list: clusters (merged when adjacent with equal
  // lists) and the gaps between them (empty lists).
  size_t cap = 2 * (size_t) r->count_i + 1, nruns = 0;
  int *runs = (int *) malloc(cap * 4 * sizeof(int));
  if (!runs) return gk_fail(err, GK_ERR_NOMEM, "out of memory for the block-sparse work list");
  size_t row = 0;
  int from = 0;
  for (int q = 0; q <= r->count_i; q++) {
    size_t s = q < r->count_i ? (size_t) r->ranges_i[2 * q] : m;
    size_t e = q < r->count_i ? (size_t) r->ranges_i[2 * q + 1] : m;
    int l0 = q < r->count_i ? from : 0, l1 = q < r->count_i ? r->slices_i[q] : 0;
    if (q < r->count_i) from = l1;
    for (int part = 0; part < 2; part++) {
      // part 0: the gap before cluster q (empty list); part 1: the cluster.
      size_t a = part == 0 ? row : s, b = part == 0 ? s : e;
      int la = part == 0 ? 0 : l0, lb = part == 0 ? 0 : l1;
      if (b <= a) continue;
      if (la == lb) la = lb = 0;
      int *last = nruns ? runs + 4 * (nruns - 1) : NULL;
      if (last && (size_t) last[1] == a && same_list(r->redranges_j, last[2], last[3], la, lb)) {
        last[1] = (int) b;
      } else {
        int *run = runs + 4 * nruns++;
        run[0] = (int) a;
        run[1] = (int) b;
        run[2] = la;
        run[3] = lb;
      }
    }
    if (e > row) row = e;
  }
  // Cut the runs: full pieces of max_rows, then the remainder.
  size_t npieces = 0;
  for (size_t u = 0; u < nruns; u++) {
    size_t len = (size_t) (runs[4 * u + 1] - runs[4 * u]);
    npieces += max_rows > 0 ? (len + max_rows - 1) / max_rows : 1;
  }
  int *out = (int *) malloc((npieces * 4 + 1) * sizeof(int));
  if (!out) {
    free(runs);
    return gk_fail(err, GK_ERR_NOMEM, "out of memory for the block-sparse work list");
  }
  size_t at = 0;
  for (size_t u = 0; u < nruns; u++) {
    const int *run = runs + 4 * u;
    int step = max_rows > 0 ? max_rows : run[1] - run[0];
    for (int s = run[0]; s < run[1]; s += step) {
      out[4 * at] = s;
      out[4 * at + 1] = run[1] - s < step ? run[1] : s + step;
      out[4 * at + 2] = run[2];
      out[4 * at + 3] = run[3];
      at++;
    }
  }
  free(runs);
  *pieces = out;
  *count = (int) npieces;
  return GK_OK;
}

/* ---- symmetric reductions ------------------------------------------------ */

/* The cluster of r's first set holding row i, or -1. Clusters are sorted and
 * an empty one never follows a non-empty one with the same start, so the
 * last cluster starting at or before i is the only candidate. */
static int cluster_of_row(const gk_reduce_ranges *r, size_t i)
{
  int lo = 0, hi = r->count_i - 1, found = -1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2;
    if ((size_t) r->ranges_i[2 * mid] <= i) {
      found = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return found >= 0 && (size_t) r->ranges_i[2 * found + 1] > i ? found : -1;
}

/* Whether the ranges red[l0 .. l1) (one cluster's list) cover [a, b): from
 * `first` on, chaining the ranges that continue the covered part. */
static int list_covers_from(const int *red, int first, int l1, size_t a, size_t b)
{
  size_t pos = a;
  for (int l = first; l < l1 && pos < b; l++) {
    size_t s = (size_t) red[2 * l], e = (size_t) red[2 * l + 1];
    if (e <= s || e <= pos) continue;   // empty, or wholly before the covered part
    if (s > pos) return 0;              // a gap (non-empty ranges are sorted)
    pos = e;
  }
  return pos >= b;
}

static int list_covers(const int *red, int l0, int l1, size_t a, size_t b)
{
  if (b <= a) return 1;
  // Start at the last range starting at or before a (a binary search over the
  // starts; empty ranges may break their order, so a miss rescans the list).
  int lo = l0, hi = l1 - 1, first = l0;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2;
    if ((size_t) red[2 * mid] <= a) {
      first = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return list_covers_from(red, first, l1, a, b) || list_covers_from(red, l0, l1, a, b);
}

int reduce_same_operand(const gk_reduce_operand *x, const gk_reduce_operand *y)
{
  return x->rows == y->rows && x->cols == y->cols &&
         ((x->host && x->host == y->host) || (x->device && x->device == y->device));
}

gk_status reduce_check_symmetric(const gk_reduce_spec *spec, const gk_reduce_operand *x,
                                 const gk_reduce_operand *y, gk_error *err)
{
  if (spec->reduction != GK_REDUCE_SUM || !spec->ranges)
    return gk_fail(err, GK_ERR_INPUT, "a symmetric reduction is a sum over block-sparse `ranges`");
  if (spec->formula)   // F(x, y) = F(y, x) is not known of a formula
    return gk_fail(err, GK_ERR_INPUT, "a symmetric reduction needs a kernel of the vocabulary, "
                   "not a formula");
  if (!reduce_same_operand(x, y))
    return gk_fail(err, GK_ERR_INPUT, "a symmetric reduction reduces a point set against itself "
                   "(x and y one operand)");
  return reduce_ranges_check_symmetric(spec->ranges, err);
}

gk_status reduce_ranges_check_symmetric(const gk_reduce_ranges *r, gk_error *err)
{
  // Every kept block [a, b) x [c, d) (a cluster and a range of its list) must
  // have its transpose kept: each cluster q' meeting [c, d) covers it, and its
  // list covers [a, b). Then the mask holds its transpose, which has as many
  // pairs: the two are equal.
  int from = 0;
  for (int q = 0; q < r->count_i; q++) {
    size_t a = (size_t) r->ranges_i[2 * q], b = (size_t) r->ranges_i[2 * q + 1];
    int to = r->slices_i[q];
    for (int l = from; l < to && b > a; l++) {
      size_t c = (size_t) r->redranges_j[2 * l], d = (size_t) r->redranges_j[2 * l + 1];
      for (size_t j = c; j < d;) {
        int p = cluster_of_row(r, j);
        if (p < 0)
          return gk_fail(err, GK_ERR_INPUT, "the ranges are not symmetric: cluster %d keeps row %zu, "
                         "which is in no cluster", q + 1, j + 1);
        int p0 = p == 0 ? 0 : r->slices_i[p - 1];
        if (!list_covers(r->redranges_j, p0, r->slices_i[p], a, b))
          return gk_fail(err, GK_ERR_INPUT, "the ranges are not symmetric: cluster %d keeps rows of "
                         "cluster %d, which does not keep all of cluster %d's rows", q + 1, p + 1,
                         q + 1);
        j = (size_t) r->ranges_i[2 * p + 1];
      }
    }
    from = to;
  }
  return GK_OK;
}
