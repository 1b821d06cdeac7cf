// The GPU engine of the kernel reductions (semantics in reduce.h), in three
// files: reduce_cuda.cu prepares a call's operands in the device layer's
// scratch and runs it; reduce_launch_cuda.cu chooses the kernel
// specialization and launches it (the 1D or 2D scheme, slices of long
// reductions); reduce_pieces_cuda.cu cuts and keeps the block-sparse work.
// The kernels are those of reduce_kernels.cuh (inst/include/gpukernels), each
// specialization compiled for the GPU in use the first time it is needed
// (device/gk_jit.h).
#ifndef GK_REDUCE_CUDA_CUH
#define GK_REDUCE_CUDA_CUH

#include <stddef.h>
#include <string>
#include "reduce/reduce.h"
#include "gpukernels/reduce_args.h"

namespace reduce_gpu {

using namespace gkreduce;

constexpr int WEIGHT_CHUNK = 8;      // columns of b per launch (more: several launches)
// k-list lengths compiled for KMIN: the shortest that holds k (a list's
// insertion walks all its entries, fillers included; k = 32 in a list of 64
// paid twice its work and registers). Beyond KMIN_REGISTER_MAX the list is in
// local memory; beyond KMIN_LARGE the sorting strategy (reduce_kmin_large.cuh).
constexpr int KMIN_LIST_LENGTHS[] = {16, 32, KMIN_REGISTER_MAX, KMIN_LIST_MAX};
constexpr int KMIN_LARGE = KMIN_LIST_MAX;
constexpr size_t TILE_BYTES = 48 * 1024;

// The template arguments of reduce_tiles and combine_chunks
// (reduce_kernels.cuh) for one launch; the kernels are compiled for the GPU
// in use by the device layer's run-time compiler (device/gk_jit.h) the first
// time a specialization is needed.
struct Variant {
  bool single = false;
  OpKind op = OP_SUM;
  int ec = 1;              // weight columns compiled (SUM, LOGSUMEXP, SOFTMAX)
  int kmax = 0;            // KMIN: the list length compiled
  int min_blocks = 0;      // blocks per multiprocessor the registers are capped for (0: none)
  bool filter = false;     // the float pre-filter of knn's double distances (FILTER)
  const char *val = "ValKernel";   // in gkreduce, or with `source` a formula's qualified functor
  const char *source = nullptr;     // the program defining a formula's functor
  int ds = 0;              // dimension held in registers (0: any, from memory)
  int rows = 1;            // rows per thread
  bool ranged = false, two_way = false;

  const char *type() const { return single ? "float" : "double"; }
  std::string op_type() const
  {
    const std::string t = type();
    switch (op) {
    case OP_SUM: return "gkreduce::SumOp<" + t + ", " + std::to_string(ec) + ">";
    case OP_LOGSUMEXP: return "gkreduce::ExpOp<" + t + ", " + std::to_string(ec) + ", false>";
    case OP_SOFTMAX: return "gkreduce::ExpOp<" + t + ", " + std::to_string(ec) + ", true>";
    case OP_MIN: return "gkreduce::ExtremeOp<" + t + ", false>";
    case OP_MAX: return "gkreduce::ExtremeOp<" + t + ", true>";
    case OP_KMIN: return "gkreduce::KMinOp<" + t + ", " + std::to_string(kmax) + ">";
    }
    return "";
  }
  std::string tiles() const
  {
    const std::string value = std::string(source ? "" : "gkreduce::") + val;
    return "gkreduce::reduce_tiles<" + std::string(type()) + ", " + op_type() + ", " + value +
           ", " + std::to_string(ds) + ", " + std::to_string(rows) + ", " + (ranged ? "true" : "false") +
           ", " + (two_way ? "true" : "false") + ", " + std::to_string(min_blocks) + ", " +
           (filter ? "true" : "false") + ">";
  }
  std::string combine() const { return "gkreduce::combine_chunks<" + op_type() + ">"; }
  int queue() const { return op == OP_KMIN ? KMIN_QUEUE : 0; }
  size_t value_bytes() const { return single ? sizeof(float) : sizeof(double); }
};

// Rows per thread of the gaussian-sum fast path. More rows share each shared-
// memory read of y_j (4 rows: about a third faster than 1), but make fewer
// blocks: a small problem keeps 1 row per thread so that, with the 2D split,
// it still fills the GPU. The tunable GK_REDUCE_ROWS (1, 2 or 4) overrides
// the choice; 4 is compiled for one weight column only.
int fast_rows(size_t m, size_t n, int e);

// Whether a variant may take the float pre-filter (FILTER in
// reduce_kernels.cuh): knn's double squared distances, dense, dimension in
// registers, k-lists of 16 entries or the minimum; the tunable
// GK_REDUCE_FLOAT_FILTER = 0 turns it off.
bool filterable(const Variant &v);
// Turns the pre-filter on for a filterable variant; the minimum (knn with
// k = 1) then takes one row per thread and 4 blocks per multiprocessor,
// unless the tunables GK_REDUCE_ROWS and GK_REDUCE_MIN_BLOCKS are set.
void take_filter(Variant *v);

// Shared memory per tile entry of a two-way launch: the column sums of each
// warp of the block (reduce_kernels.cuh).
size_t two_way_entry_bytes(size_t value_bytes);

// The exponential-family coefficients (poly1, poly2) of a kernel, or false.
bool exp_poly_of(const gk_kernel &k, double *poly1, double *poly2);
// The squared distance (knn's kernel) without the generic switch and without
// its variance (ValSqdist): the smallest values and their j do not change
// (the variance is positive), and finish multiplies them by it (out_scale).
bool sqdist_values(const gk_reduce_spec *spec);
// The kernel specialization a reduction runs: for `dim` coordinates, `e`
// weight columns in this launch, block-sparse or not, two-way or not, and
// `rows` rows per thread (the gaussian sums). False for KMIN beyond the
// register lists (kmin_large, compiled with the package).
bool choose_variant(const gk_reduce_spec *spec, bool single, int dim, int e, bool ranged, bool two_way,
                    int rows, Variant *v);

// Launches variant v over the plane a describes, in slices with an interrupt
// check between them, and the combining pass of a 2D split.
gk_status launch(const gk_reduce_spec *spec, Args a, const Variant &v, gk_error *err);

// The block-sparse work pieces of a call (reduce_ranges_pieces), on the host
// until they are packed into the upload, with the reduced ranges their lists
// index (`red`: the caller's, or for two-way pieces their own); list_max is
// the longest list in j, pairs the pairs they evaluate.
struct HostPieces {
  int *data = NULL;
  int count = 0;
  const int *red = NULL;
  int *clipped = NULL;
  size_t nred = 0, list_max = 0;
  double pairs = 0.0;
  // Cuts the pieces of ranges r over m rows, max_rows rows each, heaviest
  // first; two-way pieces get their own lists (clip).
  gk_status build(const gk_reduce_ranges *r, size_t m, int max_rows, bool two_way, gk_error *err);
  gk_status clip(gk_error *err);
  // Every row reduces over all of [0, n): the dense path serves.
  bool is_dense(const gk_reduce_ranges *r, size_t n) const;
  size_t bytes() const { return 4 * (size_t) count * sizeof(int); }
  size_t redrange_bytes() const { return count ? 2 * nred * sizeof(int) : 0; }
  ~HostPieces();
};

// Fills `plan` with the pieces just cut (sorted, on the host) and the reduced
// ranges, uploaded once into the plan's own buffer.
gk_status keep_plan(gk_reduce_plan *plan, const HostPieces &pieces, bool two_way, size_t m,
                    size_t n, double kept_pairs, int piece_rows, gk_error *err);

}  // namespace reduce_gpu
#endif
