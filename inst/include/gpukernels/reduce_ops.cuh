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

#include "gpukernels/reduce_args.h"

namespace gkreduce {


// 2^u in one MUFU.EX2 (u <= 0 here; relative error about 2^-22).
__device__ __forceinline__ float exp2_units(float u)
{
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(u));
  return r;
}

// 2^(q/64), q = 0..63, correctly rounded. In global memory (read through
// the read-only cache): the lanes of a warp read different entries, which
// constant memory would serialize.
static __device__ const double exp2_sixty_fourths[64] = {
  1.0, 1.0108892860517005, 1.0218971486541166, 1.0330248790212284,
  1.0442737824274138, 1.0556451783605572, 1.0671404006768237, 1.0787607977571199,
  1.0905077326652577, 1.102382583307841, 1.1143867425958924, 1.1265216186082418,
  1.1387886347566916, 1.1511892299529827, 1.1637248587775775, 1.1763969916502812,
  1.189207115002721, 1.202156731452703, 1.215247359980469, 1.22848053610687,
  1.241857812073484, 1.255380757024691, 1.2690509571917332, 1.2828700160787783,
  1.2968395546510096, 1.3109612115247644, 1.3252366431597413, 1.339667524053303,
  1.3542555469368927, 1.3690024229745905, 1.383909881963832, 1.3989796725383112,
  1.4142135623730951, 1.42961333839197, 1.4451808069770467, 1.460917794180647,
  1.4768261459394993, 1.4929077282912648, 1.5091644275934228, 1.5255981507445384,
  1.5422108254079407, 1.559004400237837, 1.5759808451078865, 1.593142151342267,
  1.6104903319492543, 1.6280274218573478, 1.645755478153965, 1.6636765803267364,
  1.681792830507429, 1.7001063537185235, 1.718619298122478, 1.7373338352737062,
  1.7562521603732995, 1.7753764925265212, 1.7947090750031072, 1.8142521755003989,
  1.8340080864093424, 1.8539791250833855, 1.8741676341103, 1.8945759815869656,
  1.9152065613971474, 1.9360617934922943, 1.9571441241754002, 1.978456026387951};

// 2^(u/64) in double for u <= 0 without the library's range checks:
// u = 64 e + q + r with |r| <= 1/2, 2^(r/64) by its degree-5 Taylor
// polynomial (truncation 4e-17), times the table's 2^(q/64), with 2^e added
// to the exponent: relative error below 3.3e-16 (inst/bench/RESULTS.md), in
// 10 FP64 operations where a degree-12 polynomial on [-1/2, 1/2] took 16 (the
// float64 sums are bound by the FP64 pipe). Below 2^-1021 it returns 0.
__device__ __forceinline__ double exp2_units(double u)
{
  const double magic = 6755399441055744.0;   // 1.5 * 2^52: rounds to an integer
  double shifted = u + magic;
  int n = __double2loint(shifted);
  double r = u - (shifted - magic);
  double p = 1.2417843701716925e-12;   // Horner on c_q = (ln 2 / 64)^q / q!
  p = fma(p, r, 5.732851688640402e-10);
  p = fma(p, r, 2.1173137155464776e-07);
  p = fma(p, r, 5.86490495505617e-05);
  p = fma(p, r, 0.010830424696249145);
  p = fma(p, r, 1.0);
  p *= __ldg(&exp2_sixty_fourths[n & 63]);
  // n >> 6 (rounding down) >= -1021 here; p in [0.99, 2): a normal result.
  double v = __hiloint2double(__double2hiint(p) + (n >> 6) * (1 << 20), __double2loint(p));
  return u < -1021.0 * 64 ? 0.0 : v;
}

// A finished value of MIN or KMIN: times out_scale (ValSqdist's variance),
// then knn's distance when asked (root_scale > 0).
__device__ __forceinline__ double finished(double v, const Args &a)
{
  v *= a.out_scale;
  return a.root_scale > 0 ? a.root_scale * sqrt(v > 0 ? v : 0.0) : v;
}

template <typename T> __device__ __forceinline__ T plus_infinity();
template <> __device__ __forceinline__ float plus_infinity<float>() { return INFINITY; }
template <> __device__ __forceinline__ double plus_infinity<double>() { return INFINITY; }

// The float pre-filter of double squared distances (FILTER launches,
// reduce_kernels.cuh): the points' float copies give each distance within
// `error` (Args::filter_error, from the largest coordinate), and their
// squared distance within 3 roundings; a pair whose exact value could reach
// `threshold` (the list's value to beat) has a float value at most this.
// +Inf (everything passes) until the threshold is finite.
__device__ __forceinline__ float filter_bound(double threshold, double error)
{
  if (!(threshold < plus_infinity<double>())) return plus_infinity<float>();
  const double r = sqrt(threshold > 0 ? threshold : 0.0) + error;
  return __double2float_ru(r * r * (1.0 + 0x1p-21) + 0x1p-120);
}

// sum_j F_ij b_je: float partials per tile, totals in double.
template <typename T, int EC>
struct SumOp {
  static constexpr int EC_ = EC;
  static constexpr int QUEUE = 0;   // no candidate queue (see KMinOp)
  T part[EC];
  double total[EC];
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
// Dense launches of knn's squared distance (grouped_extreme in
// reduce_kernels.cuh) push groups instead of values: the extreme of GROUP
// consecutive values with the group's first j (one FMNMX per value instead
// of a comparison and two selects), and once the row is done the kernel
// finds the first j of the winning group that reaches it.
template <typename T, bool IS_MAX>
struct ExtremeOp {
  static constexpr int EC_ = 1;
  static constexpr int QUEUE = 0;
  static constexpr int GROUP = 16;   // values per group (grouped launches)
  T best;
  int arg;       // -1: nothing seen
  float fbound;  // FILTER launches (minimum only): filter_bound of best
  __device__ void init(const Args &a) {
    best = IS_MAX ? -plus_infinity<T>() : plus_infinity<T>();
    arg = -1;
    fbound = plus_infinity<float>();
  }
  __device__ void refresh_bound(const Args &a) { fbound = filter_bound((double) best, a.filter_error); }
  __device__ __forceinline__ bool better(T v) const { return IS_MAX ? v > best : v < best; }
  // The extreme of two values of a group (no NaN arises from finite points):
  // FMNMX in float; in double a comparison and a select (fmin's NaN handling
  // costs five more instructions, and sm_90 has no DMNMX).
  __device__ __forceinline__ static T extreme(T u, T v) {
    if constexpr (sizeof(T) == 8) return IS_MAX ? (v > u ? v : u) : (v < u ? v : u);
    else return IS_MAX ? fmax(u, v) : fmin(u, v);
  }
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
    if (a.out) a.out[i] = finished((double) best, a);
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
// fills up anew. The tile loop hands the values over in groups of
// CHECK_EVERY (push_group): a group is compared with the threshold as a
// whole, its candidates go to a per-thread queue in shared memory (bind), and
// when a lane's queue is nearly full the whole warp empties its queues
// together, so the lanes insert side by side.
//
// Lists longer than KMIN_REGISTER_MAX (LOCAL) would not fit the registers:
// they hold the k entries themselves (no fillers) at run-time indices, in
// local memory (cached in L1), with the threshold and the count in registers.
// The tile loop's tests then cost what they cost for short lists, and only
// the rare insertion (about k (1 + log(n / k)) per row) walks the list.
template <typename T, int KMAX>
struct KMinOp {
  static_assert(KMAX <= KMIN_LIST_MAX, "k-lists up to KMIN_LIST_MAX (combine_kmin_lists)");
  static constexpr bool LOCAL = KMAX > KMIN_REGISTER_MAX;
  using value_type = T;
  static constexpr int EC_ = 1;
  static constexpr int QUEUE = KMIN_QUEUE;   // queued candidates per row
  static constexpr int CHECK_EVERY = 4;   // values per group (push_group)
  static constexpr int EMPTY = -1, FILLER = -2;
  T val[KMAX];
  int idx[KMAX];
  T limit;      // LOCAL: val[k - 1] once the list is full (+Inf before)
  int filled;   // LOCAL: entries held (the first `filled` of the k)
  int k;        // LOCAL: the list's length
  float fbound; // FILTER launches: filter_bound of the threshold (after each flush)
  T *queue_val;
  int *queue_j;
  int queue_end, queue_stride;   // queued entries end at queue_end = count * stride
  __device__ __forceinline__ T threshold() const { return LOCAL ? limit : val[KMAX - 1]; }
  __device__ void init(const Args &a) {
    if constexpr (LOCAL) {
      k = a.k;
      for (int q = 0; q < k; q++) {
        val[q] = plus_infinity<T>();
        idx[q] = EMPTY;
      }
      limit = plus_infinity<T>();
      filled = 0;
    } else {
#pragma unroll
      for (int q = 0; q < KMAX; q++) {
        const bool filler = q < KMAX - a.k;
        val[q] = filler ? -plus_infinity<T>() : plus_infinity<T>();
        idx[q] = filler ? FILLER : EMPTY;
      }
    }
    queue_val = nullptr;
    queue_j = nullptr;
    queue_end = 0;
    queue_stride = 0;
    fbound = plus_infinity<float>();
  }
  __device__ void refresh_bound(const Args &a) { fbound = filter_bound((double) threshold(), a.filter_error); }
  // This row's queue: entries q at val_base[q * stride], j_base[q * stride].
  __device__ void bind(T *val_base, int *j_base, int stride) {
    queue_val = val_base;
    queue_j = j_base;
    queue_stride = stride;
  }
  // Inserts before the first larger (or empty) entry; the entries after it
  // move down one place, the last one drops out.
  __device__ __forceinline__ void insert(T v, int j) {
    if constexpr (LOCAL) {
      // The place by bisection (a few dependent loads), then the entries
      // after it move down one in a loop without tests on the loaded values,
      // which the loads can overlap in: a walk from the end that compared
      // each entry waited on every load (about 6x slower at k = 100).
      if (filled == k && !(v < limit)) return;
      int lo = 0, hi = filled < k ? filled : k - 1;   // the first entry larger than v, or the end
      while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (v < val[mid]) hi = mid;
        else lo = mid + 1;
      }
      for (int q = filled < k ? filled : k - 1; q > lo; q--) {
        val[q] = val[q - 1];
        idx[q] = idx[q - 1];
      }
      val[lo] = v;
      idx[lo] = j;
      if (filled < k) filled++;
      if (filled == k) limit = val[k - 1];
      return;
    }
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
    if (v <= threshold()) {
      queue_val[queue_end] = v;
      queue_j[queue_end] = j;
      queue_end += queue_stride;
    }
  }
  // CHECK_EVERY values of this row, v[u] for j = j_of(u), by all lanes of the
  // warp together. Once the list has filled, most groups of the warp hold no
  // candidate: they cost the group's minimum, one comparison and a vote,
  // instead of a comparison and two predicated queue stores per value.
  template <class JOf>
  __device__ __forceinline__ void push_group(const T (&v)[CHECK_EVERY], JOf j_of) {
    const T threshold = this->threshold();
    T lowest = v[0];
#pragma unroll
    for (int u = 1; u < CHECK_EVERY; u++) lowest = fmin(lowest, v[u]);   // NaN: the other
    if (!__any_sync(0xffffffffu, lowest <= threshold)) return;
#pragma unroll
    for (int u = 0; u < CHECK_EVERY; u++)
      if (v[u] <= threshold) {
        queue_val[queue_end] = v[u];
        queue_j[queue_end] = j_of(u);
        queue_end += queue_stride;
      }
    checkpoint();
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
  // The tile kernel empties the queue (flush) before the list is saved or
  // finished. The combining pass merges saved lists without this state
  // (combine_kmin_lists in reduce_kernels.cuh).
  // Entry p (0 .. k - 1) of the list is at q = p + first (after the fillers).
  template <class F> __device__ __forceinline__ void each_entry(const Args &a, F &&f) const {
    if constexpr (LOCAL) {
      for (int p = 0; p < a.k; p++) f(p, val[p], idx[p]);
    } else {
#pragma unroll
      for (int q = 0; q < KMAX; q++)
        if (q >= KMAX - a.k) f(q - (KMAX - a.k), val[q], idx[q]);
    }
  }
  __device__ void save(const Args &a, int chunk, size_t i) const {
    each_entry(a, [&](int p, T v, int j) {
      a.partial[((size_t) chunk * a.k + p) * a.m + i] = (double) v;
      a.partial_index[((size_t) chunk * a.k + p) * a.m + i] = j;
    });
  }
  __device__ void finish(const Args &a, size_t i) const {
    each_entry(a, [&](int p, T v, int j) {
      a.out[i + (size_t) p * a.m] = finished((double) v, a);
      a.index[i + (size_t) p * a.m] = j + 1;
    });
  }
};

// log sum_j exp(F_ij) b_je, or the softmax average, with a running maximum
// mx: the terms exp(F_ij - mx) as 2^((F_ij - mx) log2 e) (exp2_units: one
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
  __device__ __forceinline__ static T exp_of(T t)
  {
    return exp2_units(t * (T) (1.4426950408889634 * EXP2_UNIT<T>));
  }
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
