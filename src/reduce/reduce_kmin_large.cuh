// The GPU engine's second KMIN strategy, for k beyond the register k-lists of
// reduce_ops.cuh (KMinOp): rows of x in chunks, each chunk's F_ij written to a
// bounded buffer (one row of the chunk after another) and every row sorted by
// CUB's stable radix sort, then the first k of each row kept. Ties go to the
// smaller j because the rows are filled in increasing j and the sort is stable.
#ifndef GK_REDUCE_KMIN_LARGE_CUH
#define GK_REDUCE_KMIN_LARGE_CUH

#include "device/gk_error.h"
#include "gpukernels/reduce_args.h"

namespace gkreduce {

// a: a dense launch's arguments (prepared x and y in T, k, kernel, and the
// device outputs out, m x k values, and index, m x k 1-based indices).
// Uses the device layer's GK_SCRATCH_PARTIALS scratch. Instantiated for float
// and double in reduce_kmin_large_cuda.cu.
template <typename T>
gk_status kmin_large(const Args &a, gk_error *err);

}  // namespace gkreduce
#endif
