// What the host side of the reduction engine and its kernels agree on: the
// launch arguments and the shared-memory layout of a block. Compiled by the
// host compiler (src/reduce/reduce_cuda.cu) and by NVRTC with the kernels
// (reduce_kernels.cuh), so both see one definition.
#ifndef GK_REDUCE_ARGS_H
#define GK_REDUCE_ARGS_H

#include "gpukernels/gk_kernel.h"

#ifndef __CUDACC_RTC__
#include <stddef.h>
#endif

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
  double out_scale;        // multiplies finished sums (the variance of the gaussian and exponential-family sums)
  double root_scale;       // > 0: finished values are root_scale sqrt(values) (reduce.h)
  double poly1, poly2;     // the exponential family's polynomial (ValExpPoly)
  double filter_error;     // > 0: FILTER launches' bound on |distance of the float copies - distance|
  double *out;             // m x (value columns), or NULL
  int *index;              // m x (index columns), or NULL; 1-based, 0 = none
  double *partial;         // 2D or sliced: (chunk0 + nchunks) x slots x m
  int *partial_index;      // 2D or sliced: (chunk0 + nchunks) x index slots x m
  // Block-sparse (reduce.h): block x works on the rows pieces[4x] .. pieces[4x+1]
  // over the j ranges redranges[pieces[4x+2] .. pieces[4x+3]); j_chunk and
  // blockIdx.y then split the concatenation of those ranges (within the slice).
  const int *pieces;
  const int *redranges;
  int npieces, piece_rows; // host planning: pieces and their most rows, the longest list (in j), pairs kept
  size_t list_max;
  double kept_pairs;
  // Two-way launches (symmetric sums, reduce.h; block-sparse, one weight
  // column): the sums of the columns, m doubles zeroed before the launch,
  // added into `out` (times out_scale) after it.
  double *transposed;
  // A formula's parameters (reduce.h: gk_formula), read by its functor.
  double params[GK_FORMULA_MAX_PARAMS];
};

constexpr int BLOCK = 256;   // threads per block, and rows of y per shared tile
// Threads per block of the block-sparse kernel: its work pieces are clusters,
// often of a few dozen rows (64 in the matrix-free H2 products), which blocks
// of 256 threads would leave mostly idle. Blocks of 64 cut pieces of 64 x ROWS
// rows; more blocks then share a multiprocessor, at the same thread count.
constexpr int RANGED_BLOCK = 64;
template <bool RANGED> __host__ __device__ constexpr int threads_per_block()
{
  return RANGED ? RANGED_BLOCK : BLOCK;
}

// Shared memory of a block: the tile (per entry: the values of y_j and b_j,
// and with block-sparse ranges the entry's j), then, for ops with candidate
// queues (KMinOp), the queues of every row of the block.
__host__ __device__ constexpr size_t queue_offset(int tile, int entry_bytes, bool ranged)
{
  return ((size_t) tile * (entry_bytes + (ranged ? sizeof(int) : 0)) + 15) / 16 * 16;
}
__host__ __device__ constexpr size_t queue_bytes(int queue, int threads, int rows, size_t value_bytes)
{
  return (size_t) queue * threads * rows * (value_bytes + sizeof(int));
}
// FILTER launches (reduce_kernels.cuh) keep float copies of the tile's points
// after the queues: 4 floats per entry.
constexpr int FILTER_ENTRY_FLOATS = 4;

// Values of the operands per j in the shared tile, padded to 16 bytes so that
// a point with its weights is read with vector loads.
template <typename T> __host__ __device__ constexpr int padded(int count)
{
  return sizeof(T) == 4 ? (count + 3) / 4 * 4 : (count + 1) / 2 * 2;
}

// Columns of a two-way launch's groups (reduce_kernels.cuh): 32 in float32;
// 16 in float64, where 32 values per lane would add 64 registers.
template <typename T> __host__ __device__ constexpr int column_group()
{
  return sizeof(T) == 4 ? 32 : 16;
}

// The exponentials of the GPU engine, 2^(u / EXP2_UNIT), take their argument
// in units of 1 / EXP2_UNIT: 1 in float32 (one MUFU.EX2), 64 in float64 (a
// table of 2^(q/64) and a short polynomial). Callers fold the unit into their
// constants or into the scale of the points (a power of two: exact).
template <typename T> constexpr T EXP2_UNIT = 1;
template <> constexpr double EXP2_UNIT<double> = 64;

// Candidates queued per row by the k-smallest reductions (KMinOp), which the
// host sizes shared memory for.
constexpr int KMIN_QUEUE = 16;
// The longest k-list of the tile kernels held in registers; longer lists (up
// to KMIN_LIST_MAX) live in local memory, and larger k sort instead
// (kmin_large).
constexpr int KMIN_REGISTER_MAX = 64;
constexpr int KMIN_LIST_MAX = 128;

// The reductions' states (reduce_ops.cuh) and the values and indices each
// keeps per row in the partial results of the 2D scheme and of slices.
enum OpKind { OP_SUM, OP_LOGSUMEXP, OP_SOFTMAX, OP_MIN, OP_MAX, OP_KMIN };
__host__ __device__ constexpr int partial_value_slots(OpKind op, int e, int k)
{
  return op == OP_SUM ? e : op == OP_LOGSUMEXP || op == OP_SOFTMAX ? e + 2 : op == OP_KMIN ? k : 1;
}
__host__ __device__ constexpr int partial_index_slots(OpKind op, int k)
{
  return op == OP_KMIN ? k : op == OP_MIN || op == OP_MAX ? 1 : 0;
}

// A compile-time integer, as std::integral_constant (NVRTC has no <type_traits>).
template <int K> struct int_constant {
  static constexpr int value = K;
};

}  // namespace gkreduce
#endif
