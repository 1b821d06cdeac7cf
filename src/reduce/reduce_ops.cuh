// The reductions of the GPU engine as small register-resident states, one per
// output row (semantics in reduce.h). Each state can
//   init, push a value F_ij (with its j and the row b_j in shared memory),
//   end_tile (fold per-tile float partials into double),
//   save / load itself to the 2D scheme's workspace, merge a later j chunk,
//   finish (write the row's results).
// Chunks are merged in increasing j, so "ties to the smaller index" only needs
// strict comparisons everywhere.
#ifndef GK_REDUCE_OPS_CUH
#define GK_REDUCE_OPS_CUH

#include <math.h>
#include "reduce/reduce.h"

namespace gkreduce {

// Everything a launch needs; the pointers are device memory.
struct Args {
  const void *x, *y, *b;   // prepared (scaled, in the compute precision), column-major
  size_t m, n;
  int dim, e, k;           // e: columns of b in this launch (<= the op's EC)
  int stride;              // per-j values in the shared tile: dim + e, padded
  int tile;                // rows of y per shared tile
  size_t j_begin, j_end;   // the slice of [0, n) this launch reduces over (block-sparse:
                           // of the positions in each piece's list of kept columns)
  int j_chunk, nchunks;    // the 2D split of the slice
  // Long reductions run in slices (so that they can be interrupted): every
  // block then saves its state, and the combining pass merges the state of the
  // earlier slices (partial slot 0) with this slice's chunks (slots chunk0...).
  int sliced, chunk0, carry_in, carry_out;
  int inner;               // the kernel's statistic is an inner product
  gk_kernel kernel;
  double out_scale;        // multiplies finished sums (the gaussian fast path's variance)
  double poly1, poly2;     // the exponential family's polynomial (ValExpPoly)
  double *out;             // m x (value columns), or NULL
  int *index;              // m x (index columns), or NULL; 1-based, 0 = none
  double *partial;         // 2D or sliced: (chunk0 + nchunks) x slots x m
  int *partial_index;      // 2D or sliced: (chunk0 + nchunks) x index slots x m  // Block-sparse (reduce.h): block x works on the rows pieces[4x] .. pieces[4x+1]
  // over the j ranges redranges[pieces[4x+2] .. pieces[4x+3]); j_chunk and
  // blockIdx.y then split the concatenation of those ranges (within the slice).
  const int *pieces;
  const int *redranges;
  int npieces, piece_rows; // host planning: pieces and their most rows, the longest list (in j), pairs kept
  size_t list_max;
  double kept_pairs;
};

// 2^t in one MUFU.EX2 (t <= 0 here; relative error about 2^-22).
__device__ __forceinline__ float fast_exp2(float t)
{
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(t));
  return r;
}

// 2^t in double for t <= 0 without the library's range checks: t = n + f with
// |f| <= 1/2, 2^f by its degree-12 Taylor polynomial (relative error < 3e-16),
// 2^n added to the exponent. Below 2^-1021 it returns 0.
__device__ __forceinline__ double fast_exp2(double t)
{
  if (t < -1021.0) return 0.0;
  const double magic = 6755399441055744.0;   // 1.5 * 2^52: rounds to an integer
  double shifted = t + magic;
  int n = __double2loint(shifted);
  double f = t - (shifted - magic);
  double p = 2.5678435993488206e-11;   // Horner on c_q = (ln 2)^q / q!
  p = fma(p, f, 4.4455382718708116e-10);
  p = fma(p, f, 7.054911620801123e-09);
  p = fma(p, f, 1.01780860092397e-07);
  p = fma(p, f, 1.321548679014431e-06);
  p = fma(p, f, 1.5252733804059841e-05);
  p = fma(p, f, 0.0001540353039338161);
  p = fma(p, f, 0.0013333558146428443);
  p = fma(p, f, 0.009618129107628477);
  p = fma(p, f, 0.05550410866482158);
  p = fma(p, f, 0.24022650695910072);
  p = fma(p, f, 0.6931471805599453);
  p = fma(p, f, 1.0);
  return __hiloint2double(__double2hiint(p) + n * (1 << 20), __double2loint(p));
}


template <typename T> __device__ __forceinline__ T plus_infinity();
template <> __device__ __forceinline__ float plus_infinity<float>() { return INFINITY; }
template <> __device__ __forceinline__ double plus_infinity<double>() { return INFINITY; }

// sum_j F_ij b_je: float partials per tile, totals in double.
template <typename T, int EC>
struct SumOp {
  static constexpr int EC_ = EC;
  static constexpr int QUEUE = 0;   // no candidate queue (see KMinOp)
  T part[EC];
  double total[EC];
  static int slots(int e, int k) { return e; }
  static int index_slots(int k) { return 0; }
  __device__ void init(const Args &a) {
#pragma unroll
    for (int c = 0; c < EC; c++) { part[c] = 0; total[c] = 0.0; }
  }
  __device__ __forceinline__ void push(T v, int j, const T *bj, const Args &a) {
#pragma unroll
    for (int c = 0; c < EC; c++)
      if (EC == 1 || c < a.e) part[c] = fma(v, bj[c], part[c]);
  }
  __device__ void end_tile() {
#pragma unroll
    for (int c = 0; c < EC; c++) { total[c] += (double) part[c]; part[c] = 0; }
  }
  // Loops over EC with a test (not up to a.e), so the arrays stay in registers.
  __device__ void save(const Args &a, int chunk, size_t i) const {
#pragma unroll
    for (int c = 0; c < EC; c++)
      if (c < a.e) a.partial[((size_t) chunk * a.e + c) * a.m + i] = total[c];
  }
  __device__ void load(const Args &a, int chunk, size_t i) {
    init(a);
#pragma unroll
    for (int c = 0; c < EC; c++)
      if (c < a.e) total[c] = a.partial[((size_t) chunk * a.e + c) * a.m + i];
  }
  __device__ void merge(const SumOp &o, const Args &a) {
#pragma unroll
    for (int c = 0; c < EC; c++) total[c] += o.total[c];
  }
  __device__ void finish(const Args &a, size_t i) const {
#pragma unroll
    for (int c = 0; c < EC; c++)
      if (c < a.e) a.out[i + (size_t) c * a.m] = a.out_scale * total[c];
  }
};

// min or max with the first j reaching it (writes the value and/or the index).
template <typename T, bool IS_MAX>
struct ExtremeOp {
  static constexpr int EC_ = 1;
  static constexpr int QUEUE = 0;
  T best;
  int arg;   // -1: nothing seen
  static int slots(int e, int k) { return 1; }
  static int index_slots(int k) { return 1; }
  __device__ void init(const Args &a) { best = IS_MAX ? -plus_infinity<T>() : plus_infinity<T>(); arg = -1; }
  __device__ __forceinline__ bool better(T v) const { return IS_MAX ? v > best : v < best; }
  __device__ __forceinline__ void push(T v, int j, const T *bj, const Args &a) {
    if (arg < 0 || better(v)) { best = v; arg = j; }
  }
  __device__ void end_tile() {}
  __device__ void save(const Args &a, int chunk, size_t i) const {
    a.partial[(size_t) chunk * a.m + i] = (double) best;
    a.partial_index[(size_t) chunk * a.m + i] = arg;
  }
  __device__ void load(const Args &a, int chunk, size_t i) {
    best = (T) a.partial[(size_t) chunk * a.m + i];
    arg = a.partial_index[(size_t) chunk * a.m + i];
  }
  __device__ void merge(const ExtremeOp &o, const Args &a) {
    if (o.arg >= 0) push(o.best, o.arg, nullptr, a);
  }
  __device__ void finish(const Args &a, size_t i) const {
    if (a.out) a.out[i] = a.out_scale * (double) best;
    if (a.index) a.index[i] = arg + 1;
  }
};

// The k smallest values, sorted, ties kept in order of j (k <= KMAX). The
// list holds KMAX entries so that every index is a compile-time constant and
// the list stays in registers (a loop up to the runtime k would put it in
// local memory, 3x slower for k = 10 on an H100): its first KMAX - k entries
// are fixed fillers (-Inf, never moved), the last k the k smallest so far, so
// the last entry is the threshold a new value must beat.
//
// A value that beats it is not inserted at once: one lane inserting while the
// other 31 wait costs the warp a whole insertion (about 5 instructions per
// entry) for each lane's candidate, and with the 2D split every chunk's list
// fills up anew. The tile loop pushes candidates into a per-thread queue in
// shared memory (bind) and calls checkpoint every CHECK_EVERY pairs; when a
// lane's queue is nearly full the whole warp empties its queues together, so
// the lanes insert side by side.
template <typename T, int KMAX>
struct KMinOp {
  static constexpr int EC_ = 1;
  static constexpr int QUEUE = 16;        // queued candidates per row
  static constexpr int CHECK_EVERY = 4;   // pairs between checkpoints
  static constexpr int EMPTY = -1, FILLER = -2;
  T val[KMAX];
  int idx[KMAX];
  T *queue_val;
  int *queue_j;
  int queue_end, queue_stride;   // queued entries end at queue_end = count * stride
  static int slots(int e, int k) { return k; }
  static int index_slots(int k) { return k; }
  __device__ void init(const Args &a) {
#pragma unroll
    for (int q = 0; q < KMAX; q++) {
      const bool filler = q < KMAX - a.k;
      val[q] = filler ? -plus_infinity<T>() : plus_infinity<T>();
      idx[q] = filler ? FILLER : EMPTY;
    }
    queue_val = nullptr;
    queue_j = nullptr;
    queue_end = 0;
    queue_stride = 0;
  }
  // This row's queue: entries q at val_base[q * stride], j_base[q * stride].
  __device__ void bind(T *val_base, int *j_base, int stride) {
    queue_val = val_base;
    queue_j = j_base;
    queue_stride = stride;
  }
  // Inserts before the first larger (or empty) entry; the entries after it
  // move down one place, the last one drops out.
  __device__ __forceinline__ void insert(T v, int j) {
    if (idx[KMAX - 1] != EMPTY && !(v < val[KMAX - 1])) return;
    bool moving = false;
#pragma unroll
    for (int q = 0; q < KMAX; q++) {
      if (moving || idx[q] == EMPTY || v < val[q]) {
        T tv = val[q];
        int tj = idx[q];
        val[q] = v;
        idx[q] = j;
        v = tv;
        j = tj;
        moving = true;
      }
    }
  }
  // <= : an empty list's threshold is +Inf, which an infinite value must reach.
  // The values are F_ij without the kernel's variance (ValSqdist), which
  // finish applies (out_scale).
  __device__ __forceinline__ void push(T v, int j, const T *bj, const Args &a) {
    if (v <= val[KMAX - 1]) {
      queue_val[queue_end] = v;
      queue_j[queue_end] = j;
      queue_end += queue_stride;
    }
  }
  // Called by all lanes of the warp together (the tile loop is warp-uniform).
  __device__ __forceinline__ void checkpoint() {
    if (__any_sync(0xffffffffu, queue_end > (QUEUE - CHECK_EVERY) * queue_stride)) flush();
  }
  // Queued in increasing j, so inserting in queue order keeps ties in order.
  __device__ void flush() {
#pragma unroll 1
    for (int at = 0; at < queue_end; at += queue_stride) insert(queue_val[at], queue_j[at]);
    queue_end = 0;
  }
  __device__ void end_tile() { checkpoint(); }
  // The queue must be empty before the list is saved or finished.
  __device__ void save(const Args &a, int chunk, size_t i) {
    flush();
#pragma unroll
    for (int q = 0; q < KMAX; q++) {
      const int p = q - (KMAX - a.k);
      if (p < 0) continue;
      a.partial[((size_t) chunk * a.k + p) * a.m + i] = (double) val[q];
      a.partial_index[((size_t) chunk * a.k + p) * a.m + i] = idx[q];
    }
  }
  __device__ void load(const Args &a, int chunk, size_t i) {
    init(a);
#pragma unroll
    for (int q = 0; q < KMAX; q++) {
      const int p = q - (KMAX - a.k);
      if (p < 0) continue;
      val[q] = (T) a.partial[((size_t) chunk * a.k + p) * a.m + i];
      idx[q] = a.partial_index[((size_t) chunk * a.k + p) * a.m + i];
    }
  }
  // Once per row (the combining pass): the other list may sit in local memory.
  __device__ void merge(const KMinOp &o, const Args &a) {
#pragma unroll 1
    for (int q = KMAX - a.k; q < KMAX && o.idx[q] != EMPTY; q++) insert(o.val[q], o.idx[q]);
  }
  __device__ void finish(const Args &a, size_t i) {
    flush();
#pragma unroll
    for (int q = 0; q < KMAX; q++) {
      const int p = q - (KMAX - a.k);
      if (p < 0) continue;
      a.out[i + (size_t) p * a.m] = a.out_scale * (double) val[q];
      a.index[i + (size_t) p * a.m] = idx[q] + 1;
    }
  }
};

// log sum_j exp(F_ij) b_je, or the softmax average, with a running maximum
// mx: the terms exp(F_ij - mx) as 2^((F_ij - mx) log2 e) (fast_exp2: one
// MUFU.EX2 in float32, relative error about 1e-6 for the terms that matter;
// the polynomial in float64), summed per tile in the compute precision and
// folded into double totals at the tile's end, as SumOp does. den (the
// softmax's denominator) only for the softmax.
template <typename T, int EC, bool SOFTMAX>
struct ExpOp {
  static constexpr int EC_ = EC;
  static constexpr int QUEUE = 0;
  T mx;
  T part[EC], part_den;   // this tile's sums, relative to mx
  double sum[EC];         // the earlier tiles', relative to mx
  double den;
  static int slots(int e, int k) { return e + 2; }
  static int index_slots(int k) { return 0; }
  __device__ __forceinline__ static T exp_of(T t) { return fast_exp2(t * (T) 1.4426950408889634); }
  __device__ void init(const Args &a) {
    mx = -plus_infinity<T>();
    den = 0.0;
    part_den = 0;
#pragma unroll
    for (int c = 0; c < EC; c++) { sum[c] = 0.0; part[c] = 0; }
  }
  __device__ __forceinline__ void rescale(double f) {
    den *= f;
#pragma unroll
    for (int c = 0; c < EC; c++) sum[c] *= f;
  }
  __device__ __forceinline__ void push(T v, int j, const T *bj, const Args &a) {
    if (v > mx) {
      const T f = exp_of(mx - v);   // 0 for the first value (mx = -Inf)
      rescale((double) f);
      part_den *= f;
#pragma unroll
      for (int c = 0; c < EC; c++) part[c] *= f;
      mx = v;
    }
    const T w = exp_of(v - mx);
    if (SOFTMAX) part_den += w;
#pragma unroll
    for (int c = 0; c < EC; c++)
      if (EC == 1 || c < a.e) part[c] = fma(w, bj[c], part[c]);
  }
  __device__ void end_tile() {
    den += (double) part_den;
    part_den = 0;
#pragma unroll
    for (int c = 0; c < EC; c++) { sum[c] += (double) part[c]; part[c] = 0; }
  }
  __device__ void save(const Args &a, int chunk, size_t i) const {
    double *p = a.partial + (size_t) chunk * (a.e + 2) * a.m + i;
    p[0] = (double) mx;
    p[a.m] = den;
#pragma unroll
    for (int c = 0; c < EC; c++)
      if (c < a.e) p[(size_t) (c + 2) * a.m] = sum[c];
  }
  __device__ void load(const Args &a, int chunk, size_t i) {
    init(a);
    const double *p = a.partial + (size_t) chunk * (a.e + 2) * a.m + i;
    mx = (T) p[0];
    den = p[a.m];
#pragma unroll
    for (int c = 0; c < EC; c++)
      if (c < a.e) sum[c] = p[(size_t) (c + 2) * a.m];
  }
  // Chunks meet once per row: exact exponentials in double. A chunk that saw
  // no value has mx = -Inf and adds nothing.
  __device__ void merge(const ExpOp &o, const Args &a) {
    if (o.mx == -plus_infinity<T>()) return;
    if (o.mx > mx) {
      rescale(mx == -plus_infinity<T>() ? 0.0 : exp((double) mx - (double) o.mx));
      mx = o.mx;
    }
    double f = exp((double) o.mx - (double) mx);
    den += f * o.den;
#pragma unroll
    for (int c = 0; c < EC; c++) sum[c] += f * o.sum[c];
  }
  __device__ void finish(const Args &a, size_t i) const {
#pragma unroll
    for (int c = 0; c < EC; c++)
      if (c < a.e)
        a.out[i + (size_t) c * a.m] = SOFTMAX ? sum[c] / den : (double) mx + log(sum[c]);
  }
};

}  // namespace gkreduce
#endif
