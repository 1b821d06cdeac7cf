// The block conjugate-gradient steps of the GP engine on the GPU (gp_cuda.cu
// runs the iteration): column operations over the active columns of n x K
// state blocks, whose sums run in a fixed order (per thread block, then the
// blocks in order) so that a run repeats to the bit.
#ifndef GK_GP_CG_CUDA_CUH
#define GK_GP_CG_CUDA_CUH

#include <stddef.h>
#include <cuda_runtime.h>

namespace gp_cg {

const int kThreads = 256;

// Thread blocks for `rows` rows, kThreads each, within a grid dimension.
inline unsigned blocks_for(size_t rows)
{
  size_t b = (rows + kThreads - 1) / kThreads;
  return (unsigned) (b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

// dst[:, c] = src[:, cols[c]] for the k active columns.
void gather(size_t n, const double *src, const int *cols, int k, unsigned parts, double *dst,
            cudaStream_t s);

// out[c] = <a[:, cols[c]], b[:, c]> for the k active columns, in `parts`
// block partials (partial: k x parts) summed in order.
void dots(size_t n, const double *a, const int *cols, const double *b, int k, unsigned parts,
          double *partial, double *out, cudaStream_t s);

// One CG step of the k active columns, given pq[c] = <p_j, q_c> (j = cols[c]):
// x_j += alpha p_j, r_j -= alpha q_c, beta = <r_j, r_j> / rr[j], p_j = r_j +
// beta p_j; alpha and beta into coef_a / coef_b, the new <r_j, r_j> into
// rr[j] (next: k sums of scratch).
void step(size_t n, const int *cols, int k, unsigned parts, const double *pq, const double *q,
          double *x, double *r, double *p, double *rr, double *partial, double *next,
          double *coef_a, double *coef_b, cudaStream_t s);

// dst (row-major, row i's k values at dst + i k) = src[:, cols[c]] for the k
// columns (cols NULL: the first k), src column-major with n rows.
void to_rows(size_t n, const double *src, const int *cols, int k, double *dst, cudaStream_t s);

// dst (column-major, n x k) = src (row-major, n x k).
void from_rows(size_t n, const double *src, int k, double *dst, cudaStream_t s);

// y += a x, count entries.
void add_scaled(size_t count, double a, const double *x, double *y);

}  // namespace gp_cg
#endif
