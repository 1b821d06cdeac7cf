// The GPU kernels of the reductions: the tiled map-reduce (KeOps GPU_1D, and
// GPU_2D when blockIdx.y splits the j range into chunks) and the pass that
// combines the 2D chunks. Installed with the package and compiled at run
// time by NVRTC, one specialization at a time (src/reduce/reduce_jit.cu).
#ifndef GK_REDUCE_KERNELS_CUH
#define GK_REDUCE_KERNELS_CUH

#include "gpukernels/reduce_values.cuh"

namespace gkreduce {

// Calls f(int_constant<K>) for K = count in 1..MOST (count is
// warp-uniform): a loop over K rows per thread compiled for each K, so that a
// warp with fewer rows issues fewer instructions instead of idle ones.
template <int MOST, class F> __device__ __forceinline__ void with_row_count(int count, F &&f)
{
  if constexpr (MOST > 1) {
    if (count < MOST) {
      with_row_count<MOST - 1>(count, f);
      return;
    }
  }
  f(int_constant<MOST>());
}

// ---- two-way (symmetric) launches -----------------------------------------
// A symmetric sum (reduce.h) evaluates each kernel value F_ij of a block's
// list beyond its own rows (j >= row_end: the lists are clipped to j >=
// row_begin, so these pairs are nowhere else evaluated) once and uses it for
// the row, a_i += F_ij b_j, and for the column, a_j += F_ij b_i. The columns'
// sums over the block's rows are made per group of COLUMN_GROUP tile entries:
// each lane holds F_ij b_i for the group's columns, a transpose-reduce over
// the warp leaves lane l with column l's sum, the warps' sums meet in shared
// memory and each column goes to `transposed` with one atomic add per block
// and tile. Groups of 32 in float32; 16 in float64, where 32 values per lane
// would add 64 registers to the kernel's 80.

// One step of the transpose-reduce over lane bit O: each lane keeps half of
// its O + O columns (the upper half when its bit O is set), sends the other
// half to lane ^ O and adds what that lane sends for the kept half. After the
// steps O = C/2 ... 1, p[0] holds column (lane % C)'s sum: C - 1 exchanges
// per lane for C columns, where a reduction per column takes 5.
template <int O, int C, typename T> __device__ __forceinline__ void transpose_step(T (&p)[C], int lane)
{
  const bool upper = (lane & O) != 0;
#pragma unroll
  for (int k = 0; k < O; k++) {
    const T send = upper ? p[k] : p[k + O];
    const T keep = upper ? p[k + O] : p[k];
    p[k] = keep + __shfl_xor_sync(0xffffffffu, send, O);
  }
  if constexpr (O > 1) transpose_step<O / 2>(p, lane);
}

// The sums over the warp's 32 lanes of p[0 .. C): lane l gets column l % C's
// (a 16-column group first adds the lanes l and l ^ 16 column by column).
template <int C, typename T> __device__ __forceinline__ T warp_column_sums(T (&p)[C])
{
  static_assert(C == 16 || C == 32, "column groups of 16 or 32");
  if constexpr (C == 16) {
#pragma unroll
    for (int k = 0; k < C; k++) p[k] += __shfl_xor_sync(0xffffffffu, p[k], 16);
  }
  transpose_step<C / 2>(p, (int) (threadIdx.x & 31));
  return p[0];
}

// One block: ROWS x NT output rows against the j chunk blockIdx.y. With one
// chunk the states finish directly (GPU_1D); otherwise they go to the
// workspace for combine_chunks (GPU_2D). Thread t holds rows r * NT + t. RANGED:
// the block's rows and j ranges come from its block-sparse piece, and each
// warp reduces only the row groups r that hold one of the piece's rows (a
// cluster's last piece is often short: with every group reduced, clusters of
// about 1000 points left 8% of the row slots idle).
// TWO_WAY: a symmetric sum (see above; RANGED, one row per thread, one
// weight column). MIN_BLOCKS: blocks per multiprocessor the registers are
// capped for (the k-lists in double precision otherwise leave 2 blocks); 0
// asks nothing, and ptxas picks the registers itself. A floor of 1 is no
// cap: it lets ptxas take up to 255 registers per thread, and it takes many
// (the float32 two-way sums 128 instead of 72, 16 warps per multiprocessor
// instead of 28), so launches choose between 0 and 1 (register_floor).
// FILTER: knn's double squared distances (KMinOp, or the grouped minimum of
// k = 1) first from float copies of the points (FP32 pipe); a group of pairs
// whose float values cannot reach any lane's list or minimum (filter_bound,
// conservative: the same results) is skipped. It pays where few groups hold a
// candidate (k = 10 at 1e5: 20 -> 15-16.5 ms; k = 1, groups of 8 pairs and one
// row per thread: kernel 5.5 -> 5.0 ms); at k = 32, 100 most pass, and a test
// per pair made k = 1 10.4 -> 15 ms.
template <typename T, class Op, class Val, int DS, int ROWS, bool RANGED, bool TWO_WAY = false,
          int MIN_BLOCKS = 0, bool FILTER = false>
__global__ void __launch_bounds__(threads_per_block<RANGED>(), MIN_BLOCKS) reduce_tiles(Args a)
{
  static_assert(!TWO_WAY || (RANGED && ROWS == 1 && Op::EC_ == 1 && Op::QUEUE == 0),
                "two-way launches: block-sparse sums, one row per thread, one weight column");
  // A min or max by groups of values (op_group): one FMNMX per value in float
  // (float32 knn k = 1 at 1e5: kernel 3.8 -> 2.75 ms), and at the end the
  // first j of each row's winning group. Filtered groups are shorter: a
  // warp's group passes the filter when any of its rows' does.
  constexpr int GROUP = RANGED || TWO_WAY || DS == 0 || !recomputable<Val>::value ? 0
                        : FILTER ? op_group<Op>::value / 2 : op_group<Op>::value;
  static_assert(!FILTER || (sizeof(T) == 8 && DS > 0 && DS <= FILTER_ENTRY_FLOATS && !RANGED && !TWO_WAY &&
                            (Op::QUEUE > 0 || GROUP > 0)),
                "the float pre-filter: double points in registers, dense launches");
  constexpr int NT = threads_per_block<RANGED>();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T *tile = reinterpret_cast<T *>(smem_raw);
  const T *x = static_cast<const T *>(a.x);
  const T *y = static_cast<const T *>(a.y);
  const T *b = static_cast<const T *>(a.b);
  const int dim = DS > 0 ? DS : a.dim;
  const int stride = DS > 0 ? padded<T>(DS + Op::EC_) : a.stride;
  const bool inner = Val::INNER && a.inner;

  size_t row_begin = (size_t) blockIdx.x * (NT * ROWS), row_end = a.m;
  int list0 = 0, list1 = 0;
  size_t rows[ROWS];
  T xr[ROWS][DS > 0 ? DS : 1];
  Op st[ROWS];
  if constexpr (RANGED) {
    const int *piece = a.pieces + 4 * (size_t) blockIdx.x;
    row_begin = (size_t) piece[0];
    row_end = (size_t) piece[1];
    list0 = piece[2];
    list1 = piece[3];
  }
  // Row groups holding a row of this warp (all of them in dense launches).
  int warp_rows = ROWS;
  if constexpr (RANGED) {
    const long first = (long) (threadIdx.x & ~31u), left = (long) (row_end - row_begin) - first;
    warp_rows = left <= 0 ? 0 : (int) ((left + NT - 1) / NT < ROWS ? (left + NT - 1) / NT : ROWS);
  }
#pragma unroll
  for (int r = 0; r < ROWS; r++) {
    rows[r] = row_begin + r * NT + threadIdx.x;
    size_t i = rows[r] < row_end ? rows[r] : row_end - 1;   // idle threads compute on a valid row
    if (DS > 0) {
#pragma unroll
      for (int d = 0; d < (DS > 0 ? DS : 1); d++) xr[r][d] = x[i + (size_t) d * a.m];
    }
    st[r].init(a);
  }
  if constexpr (Op::QUEUE > 0) {
    // The candidate queues follow the tile (queue_bytes): entry q of row r of
    // this thread at [q * NT * ROWS + r * NT + thread], free of bank conflicts.
    T *queue_val = reinterpret_cast<T *>(smem_raw + queue_offset(a.tile, a.stride * (int) sizeof(T), RANGED));
    int *queue_j = reinterpret_cast<int *>(queue_val + (size_t) Op::QUEUE * NT * ROWS);
#pragma unroll
    for (int r = 0; r < ROWS; r++)
      st[r].bind(queue_val + r * NT + threadIdx.x, queue_j + r * NT + threadIdx.x, NT * ROWS);
  }
  const bool busy = warp_rows > 0;
  const int width = dim + a.e;
  // FILTER: the tile's points in float after the queues, and this thread's.
  float *tile_f = nullptr;
  float xf[ROWS][DS > 0 ? DS : 1];
  if constexpr (FILTER) {
    tile_f = reinterpret_cast<float *>(smem_raw + queue_offset(a.tile, a.stride * (int) sizeof(T), RANGED) +
                                       queue_bytes(Op::QUEUE, NT, ROWS, sizeof(T)));
#pragma unroll
    for (int r = 0; r < ROWS; r++)
#pragma unroll
      for (int d = 0; d < (DS > 0 ? DS : 1); d++) xf[r][d] = (float) xr[r][d];
  }
  // The float squared distance of row group r to tile entry q.
  auto value_f = [&](int r, int q) {
    const float *yf = tile_f + q * FILTER_ENTRY_FLOATS;
    float s = 0;
#pragma unroll
    for (int d = 0; d < (DS > 0 ? DS : 1); d++) {
      const float t = xf[r][d] - yf[d];
      s = fmaf(t, t, s);
    }
    return s;
  };
  // Two-way: this thread's b_i (0 for an idle thread: it adds nothing to the
  // columns), the warps holding rows (the first ones), and the warps' column
  // sums of a tile, after the tile in shared memory (where KMinOp's queues go).
  T b_row = 0;
  int row_warps = 0;
  T *column_sums = nullptr;
  if constexpr (TWO_WAY) {
    if (rows[0] < row_end) b_row = b[rows[0]];
    const size_t held = row_end - row_begin;
    row_warps = (int) ((held + 31) / 32 < (size_t) (NT / 32) ? (held + 31) / 32 : NT / 32);
    column_sums = reinterpret_cast<T *>(smem_raw + queue_offset(a.tile, a.stride * (int) sizeof(T), RANGED));
  }

  // Copies y_j and b_j, j in [j0, j0 + len), to the tile's entries [at, at + len)
  // (cooperative, coalesced).
  auto load = [&](size_t j0, int len, int at) {
    for (int c = 0; c < width; c++) {
      const T *src = c < dim ? y + j0 + (size_t) c * a.n : b + j0 + (size_t) (c - dim) * a.n;
      for (int q = threadIdx.x; q < len; q += NT) {
        tile[(at + q) * stride + c] = src[q];
        if constexpr (FILTER) {
          if (c < dim) tile_f[(at + q) * FILTER_ENTRY_FLOATS + c] = (float) src[q];
        }
      }
    }
  };
  // F(x_i, y_j) for row group r and the tile entry yj (idle threads compute
  // on a valid row).
  auto value = [&](int r, const T *yj) {
    size_t i = rows[r] < row_end ? rows[r] : row_end - 1;
    if constexpr (Val::POINTS) return Val::template points<T, DS>(xr[r], x + i, a.m, yj, a);
    else return Val::eval(pair_stat<T, DS, Val::INNER>(xr[r], x + i, a.m, yj, dim, inner), a);
  };
  // Reduces the rows over the first `len` entries of the loaded tile; entry q
  // holds y_j for j = j_of(q).
  auto reduce_tile = [&](int len, auto j_of) {
    // The first NR row groups against the tile.
    auto reduce_rows = [&](auto row_count) {
      constexpr int NR = decltype(row_count)::value;
      auto pair = [&](int q) {
        const T *yj = tile + q * stride;
        const int j = j_of(q);
#pragma unroll
        for (int r = 0; r < NR; r++) st[r].push(value(r, yj), j, yj + dim, a);
      };
      // FILTER: whether no lane's row may take any of the `count` (<= G)
      // entries from q on: their float values all lie above each row's bound.
      auto filtered_out = [&](int q, auto group, int count) {
        bool maybe = false;
        if constexpr (FILTER) {
          constexpr int G = decltype(group)::value;
#pragma unroll
          for (int r = 0; r < NR; r++) {
            float lowest = value_f(r, q);
#pragma unroll
            for (int u = 1; u < G; u++)
              if (u < count) lowest = fminf(lowest, value_f(r, q + u));
            maybe |= lowest <= st[r].fbound;
          }
        }
        return !__any_sync(0xffffffffu, maybe);
      };
      if constexpr (TWO_WAY) {
        // Groups of C entries: the row's sum as one-way, and the columns
        // beyond the block's rows (the diagonal block's are summed one way)
        // into column_sums[warp][q].
        constexpr int C = column_group<T>();
        const int lane = (int) (threadIdx.x & 31), warp = (int) (threadIdx.x >> 5);
        for (int q0 = 0; q0 < len; q0 += C) {
          T p[C];
          // Whole groups beyond the block's rows (the common case: every
          // tile but the diagonal block's) take the loop without a test per
          // entry; the lanes test the group's C entries at once.
          const int mine = q0 + (lane & (C - 1));
          if (__all_sync(0xffffffffu, q0 + C <= len && (size_t) j_of(mine < len ? mine : q0) >= row_end)) {
#pragma unroll
            for (int u = 0; u < C; u++) {
              const T *yj = tile + (q0 + u) * stride;
              const T f = value(0, yj);
              st[0].push(f, 0, yj + dim, a);
              p[u] = f * b_row;
            }
            const T sum = warp_column_sums(p);
            if (lane < C) column_sums[warp * a.tile + q0 + lane] = sum;
            continue;
          }
          bool beyond = false;   // warp-uniform: every lane reads the same entries
#pragma unroll
          for (int u = 0; u < C; u++) {
            p[u] = 0;
            if (q0 + u < len) {
              const T *yj = tile + (q0 + u) * stride;
              const int j = j_of(q0 + u);
              const T f = value(0, yj);
              st[0].push(f, j, yj + dim, a);
              if ((size_t) j >= row_end) {
                p[u] = f * b_row;
                beyond = true;
              }
            }
          }
          if (!beyond) continue;
          const T sum = warp_column_sums(p);
          if (lane < C && q0 + lane < len) column_sums[warp * a.tile + q0 + lane] = sum;
        }
      } else if constexpr (Op::QUEUE > 0) {
        // Values in groups of CHECK_EVERY pairs per row, each group tested
        // against the list as a whole (push_group), candidate queues emptied
        // by whole warps; the rest of the tile is followed by end_tile's
        // checkpoint.
        constexpr int G = Op::CHECK_EVERY;
        int q = 0;
        for (; q + G <= len; q += G) {
          if constexpr (FILTER) {
            if (filtered_out(q, int_constant<G>(), G)) continue;
          }
          T v[NR][G];
#pragma unroll
          for (int u = 0; u < G; u++) {
            const T *yj = tile + (q + u) * stride;
#pragma unroll
            for (int r = 0; r < NR; r++) v[r][u] = value(r, yj);
          }
#pragma unroll
          for (int r = 0; r < NR; r++) {
            const T before = st[r].threshold();
            st[r].push_group(v[r], [&](int u) { return j_of(q + u); });
            if constexpr (FILTER) {
              if (st[r].threshold() != before) st[r].refresh_bound(a);
            }
          }
        }
        for (; q < len; q++) pair(q);
      } else if constexpr (GROUP > 0) {
        // The extreme of each group of GROUP entries per row, pushed with the
        // group's first j; a short last group takes the entries left.
        auto push_group = [&](int q, int count) {
          if constexpr (FILTER) {
            if (filtered_out(q, int_constant<GROUP>(), count)) return;
          }
          T low[NR];
#pragma unroll
          for (int u = 0; u < GROUP; u++) {
            if (u < count) {
              const T *yj = tile + (q + u) * stride;
#pragma unroll
              for (int r = 0; r < NR; r++) {
                const T v = value(r, yj);
                low[r] = u == 0 ? v : Op::extreme(low[r], v);
              }
            }
          }
#pragma unroll
          for (int r = 0; r < NR; r++) {
            if constexpr (FILTER) {
              const int before = st[r].arg;
              st[r].push(low[r], j_of(q), nullptr, a);
              if (st[r].arg != before) st[r].refresh_bound(a);
            } else {
              st[r].push(low[r], j_of(q), nullptr, a);
            }
          }
        };
        int q = 0;
        for (; q + GROUP <= len; q += GROUP) push_group(q, GROUP);
        if (q < len) push_group(q, len - q);
      } else {
#pragma unroll 4
        for (int q = 0; q < len; q++) pair(q);
      }
#pragma unroll
      for (int r = 0; r < NR; r++) st[r].end_tile();
    };
    __syncthreads();
    if (busy) {
      if constexpr (RANGED) with_row_count<ROWS>(warp_rows, reduce_rows);
      else reduce_rows(int_constant<ROWS>());
    }
    __syncthreads();
    if constexpr (TWO_WAY) {
      // The columns beyond the block's rows (every warp holding rows wrote
      // them): the warps' sums in warp order, one atomic add per column. The
      // next tile's load waits for these reads of the tile's j.
      for (int q = threadIdx.x; q < len; q += NT) {
        const int j = j_of(q);
        if ((size_t) j < row_end) continue;
        T sum = column_sums[q];
        for (int w = 1; w < row_warps; w++) sum += column_sums[w * a.tile + q];
        atomicAdd(a.transposed + j, (double) sum);
      }
      __syncthreads();
    }
  };

  if constexpr (!RANGED) {
    const size_t j0 = a.j_begin + (size_t) blockIdx.y * a.j_chunk;
    const size_t j1 = j0 + a.j_chunk < a.j_end ? j0 + a.j_chunk : a.j_end;
    for (size_t jt = j0; jt < j1; jt += a.tile) {
      const int len = (int) (j1 - jt < (size_t) a.tile ? j1 - jt : (size_t) a.tile);
      load(jt, len, 0);
      reduce_tile(len, [&](int q) { return (int) (jt + q); });
    }
  } else {
    // This chunk's window [v0, v1) of the concatenation of the list's ranges
    // (the slice holds the positions [j_begin, j_end) of every list), in tiles
    // filled from consecutive ranges: short ranges (clusters of 64 points in
    // the H2 products) would otherwise each cost a mostly empty tile and two
    // barriers. tile_j holds each entry's j.
    int *tile_j = reinterpret_cast<int *>(tile + (size_t) a.tile * stride);
    const size_t v0 = a.j_begin + (size_t) blockIdx.y * a.j_chunk;
    const size_t v1 = v0 + a.j_chunk < a.j_end ? v0 + a.j_chunk : a.j_end;
    size_t pos = 0, lo = 0, hi = 0;   // position in the list; the current range's rest
    auto read_range = [&](int l) {
      lo = (size_t) a.redranges[2 * l];
      hi = (size_t) a.redranges[2 * l + 1];
    };
    int l = list0;
    for (; l < list1; l++) {   // to the range holding v0
      read_range(l);
      if (pos + (hi - lo) > v0) {
        lo += v0 - pos;
        pos = v0;
        break;
      }
      pos += hi - lo;
    }
    while (l < list1 && pos < v1) {
      int filled = 0;
      while (filled < a.tile && l < list1 && pos < v1) {
        size_t take = hi - lo;
        if (take > (size_t) (a.tile - filled)) take = (size_t) (a.tile - filled);
        if (take > v1 - pos) take = v1 - pos;
        load(lo, (int) take, filled);
        for (int q = threadIdx.x; q < (int) take; q += NT) tile_j[filled + q] = (int) (lo + q);
        filled += (int) take;
        lo += take;
        pos += take;
        if (lo == hi && ++l < list1) read_range(l);
      }
      reduce_tile(filled, [&](int q) { return tile_j[q]; });
    }
  }
  if constexpr (GROUP > 0) {
    // Each row's winning group (its first j in arg; the groups were pushed
    // in increasing j, replaced only by a strictly better extreme) holds the
    // first j reaching the extreme: the first of its entries whose value,
    // computed again from y in global memory, equals it. Entries past a short
    // group's end come after that one; j_stop bounds the reads.
    const size_t j0 = a.j_begin + (size_t) blockIdx.y * a.j_chunk;
    const size_t j_stop = j0 + a.j_chunk < a.j_end ? j0 + a.j_chunk : a.j_end;
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
      if (rows[r] >= row_end || st[r].arg < 0) continue;
      const size_t first = (size_t) st[r].arg;
#pragma unroll 1
      for (size_t j = first; j < j_stop && j < first + GROUP; j++) {
        T yj[DS > 0 ? DS : 1];
#pragma unroll
        for (int d = 0; d < (DS > 0 ? DS : 1); d++) yj[d] = y[j + (size_t) d * a.n];
        if (value(r, yj) == st[r].best) {
          st[r].arg = (int) j;
          break;
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < ROWS; r++) {
    if constexpr (Op::QUEUE > 0) st[r].flush();   // queued candidates into the list
    if (rows[r] >= row_end) continue;
    if (a.nchunks == 1 && !a.sliced) st[r].finish(a, rows[r]);
    else st[r].save(a, a.chunk0 + blockIdx.y, rows[r]);
  }
}

// combine_chunks for the k-smallest lists (KMinOp): each chunk's sorted
// list (k values and their j, empty entries last with +Inf) merged in order
// of the chunks, so that among equal values the smaller j stays first. In
// local memory with run-time indices: the pass runs once per row, and this
// form compiles in a fraction of the time of the register lists.
template <class Op>
__device__ void combine_kmin_lists(const Args &a, size_t i)
{
  using T = typename Op::value_type;
  constexpr int EMPTY = Op::EMPTY;
  T v[KMIN_LIST_MAX], w[KMIN_LIST_MAX];
  int j[KMIN_LIST_MAX], jw[KMIN_LIST_MAX];
  const int k = a.k;
  auto at = [&](int slot, int p) { return ((size_t) slot * k + p) * a.m + i; };
  int c = a.carry_in ? 0 : a.chunk0;
#pragma unroll 1
  for (int p = 0; p < k; p++) {
    v[p] = (T) a.partial[at(c, p)];
    j[p] = a.partial_index[at(c, p)];
  }
#pragma unroll 1
  for (c = a.carry_in ? a.chunk0 : a.chunk0 + 1; c < a.chunk0 + a.nchunks; c++) {
    int p = 0, q = 0;
#pragma unroll 1
    for (int r = 0; r < k; r++) {
      const T other = q < k ? (T) a.partial[at(c, q)] : plus_infinity<T>();
      const int other_j = q < k ? a.partial_index[at(c, q)] : EMPTY;
      const bool mine_left = p < k && j[p] != EMPTY, other_left = other_j != EMPTY;
      if (mine_left && (!other_left || !(other < v[p]))) {
        w[r] = v[p];
        jw[r] = j[p++];
      } else if (other_left) {
        w[r] = other;
        jw[r] = other_j;
        q++;
      } else {
        w[r] = plus_infinity<T>();
        jw[r] = EMPTY;
      }
    }
#pragma unroll 1
    for (int r = 0; r < k; r++) {
      v[r] = w[r];
      j[r] = jw[r];
    }
  }
#pragma unroll 1
  for (int p = 0; p < k; p++) {
    if (a.carry_out) {
      a.partial[at(0, p)] = (double) v[p];
      a.partial_index[at(0, p)] = j[p];
    } else {
      a.out[i + (size_t) p * a.m] = finished((double) v[p], a);
      a.index[i + (size_t) p * a.m] = j[p] + 1;
    }
  }
}

// GPU_2D's second pass: merges the chunks of each row in increasing j (after
// the earlier slices' state when carry_in), then finishes the row, or keeps the
// state in slot 0 for the next slice when carry_out.
template <class Op>
__global__ void combine_chunks(Args a)
{
  size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= a.m) return;
  if constexpr (Op::QUEUE > 0) {
    combine_kmin_lists<Op>(a, i);
  } else {
    Op st, other;
    int c = 0;
    if (a.carry_in) {
      st.load(a, 0, i);
    } else {
      st.load(a, a.chunk0, i);
      c = 1;
    }
    for (; c < a.nchunks; c++) {
      other.load(a, a.chunk0 + c, i);
      st.merge(other, a);
    }
    if (a.carry_out) st.save(a, 0, i);
    else st.finish(a, i);
  }
}

}  // namespace gkreduce
#endif
