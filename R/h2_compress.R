# Orthogonalization and compression of H2 matrices (src/h2/h2_compress.h).
# The accuracy estimator is in h2_error.R, construction to a tolerance in
# h2_tol_search.R, the printed summaries in h2_print.R.

h2_check_matrix <- function(A) {
  if (!inherits(A, "h2matrix")) stop("`A` must be an h2matrix", call. = FALSE)
  A
}

h2_check_tol <- function(tol) {
  if (!is.numeric(tol) || length(tol) != 1L || is.na(tol) || !is.finite(tol) ||
      tol <= 0 || tol >= 1) {
    stop("`tol` must be a single number between 0 and 1 (a relative error, e.g. 1e-4)",
         call. = FALSE)
  }
  as.double(tol)
}

# GPU matrices are compressed on the GPU (src/h2/h2_compress_cuda.cu);
# options(gpukernels.h2_compress_on_host = TRUE) takes them through the host's
# LAPACK instead (inst/bench/h2.R compares the two).
h2_compress_on_gpu <- function() !isTRUE(getOption("gpukernels.h2_compress_on_host", FALSE))

h2_level_ranks <- function(A) .Call(gk_r_h2_ranks, h2_ptr(A))

# Bytes of what the matrix holds: the stored low-rank data (bases, transfers,
# and the couplings unless they are computed on the fly), the stored dense
# blocks (none when they are computed on the fly), and the on-the-fly products'
# nodes and ranges (src/h2/h2_otf.h; 0 for a stored matrix).
h2_bytes <- function(A) {
  info <- h2_info(A)
  b <- info$bytes_per_entry
  couplings <- if (isTRUE(info$couplings_on_the_fly)) 0 else info$coupling_entries
  dense <- if (isTRUE(info$on_the_fly)) 0 else info$dense_entries
  c(low_rank = b * (info$basis_entries + info$transfer_entries + couplings),
    dense = b * dense,
    on_the_fly = if (isTRUE(info$on_the_fly)) info$on_the_fly_bytes else 0)
}

# A new h2matrix object for `ptr`, made from A by the transform `tol` (NA:
# orthogonalization), with A's description and native data of its own.
h2_derived <- function(A, ptr, tol) {
  B <- A
  B$native <- gk_native_new(ptr)
  B$transforms <- c(.subset2(A, "transforms"), tol)
  B$compression <- NULL
  B$accuracy <- NULL
  B$tol_choice <- NULL
  B
}

#' Orthogonalize and compress an H2 matrix
#'
#' `h2_orthogonalize()` replaces the nested bases of `A` by orthonormal ones
#' (an upsweep of QR factorizations of the leaf bases and of the stacked
#' transfer matrices, level by level) and projects every coupling matrix into
#' them: the matrix is unchanged up to rounding.
#'
#' `h2_compress()` orthogonalizes, then computes for every cluster the
#' triangular factor of its block row (a downsweep of QR factorizations of
#' the stacked coupling and parent blocks, without forming Q), truncates the
#' weighted bases by SVDs in an upsweep, and projects the couplings into the
#' new, smaller bases (Boukaram, Turkiyyah and Keyes, Section 5). The rank of
#' each level is the smallest whose discarded singular values fit an error
#' budget of \eqn{(\mathrm{tol}\,\|A\|_F)^2 / 2} shared by the levels (what a
#' level leaves unused passes to the next), so that
#' \eqn{\|A - A'\|_F \le \mathrm{tol}\,\|A\|_F}; the estimate
#' \eqn{\sqrt{2 \sum \sigma^2_{\mathrm{discarded}}} / \|A\|_F} is reported by
#' `summary()`. Since \eqn{E\|(A - A')x\|^2 = \|A - A'\|_F^2} for
#' \eqn{x \sim N(0, I)}, this is also the expected relative error of products
#' with mean-zero random vectors. The error of the compressed matrix against
#' the exact kernel matrix adds the error `A` already had: see [h2_error()].
#'
#' Both return a new `h2matrix` on the same backend and in the same precision;
#' `A` stays valid. On the CPU the computation runs in double precision with
#' R's LAPACK (single precision is widened and rounded back). On the GPU it runs
#' in the matrix's precision: batched QR factorizations and products with
#' cuBLAS, level by level; the small SVDs of the truncation (one per cluster,
#' at most \eqn{2k \times k}) with a batched one-sided Jacobi method in double
#' on the GPU (cuSOLVER's batched SVDs stop at \eqn{32 \times 32}), on the
#' host with LAPACK only where one exceeds a GPU block's shared memory (on an
#' H100 from about \eqn{2k \times k} with \eqn{k = 120}). The dense leaf blocks
#' do not change, so a GPU result shares them with `A` (they are freed with
#' the last matrix that uses them): the new matrix needs GPU memory only for
#' its bases, transfers and coupling matrices, plus workspaces: one level's
#' couplings in its new bases a chunk of at most 4 GB at a time, other
#' chunks of at most 1 GB, and one projection per level.
#'
#' A matrix computed on the fly (`h2_matrix(storage = "on_the_fly")`) can be
#' orthogonalized and compressed too. On the GPU its blocks are never
#' stored: the coupling matrices are evaluated chunk by chunk as the
#' compression needs them (on the CPU they are evaluated into the host copy
#' the computation works on). The result stores its compressed coupling
#' matrices and keeps its dense blocks on the fly (`summary()` says "dense
#' blocks on the fly, compressed couplings stored"), so that it holds only
#' its bases, transfers and compressed couplings; compressing it again keeps
#' that form. The result of a stored matrix stores its blocks, its dense ones
#' shared with `A` on the GPU as above.
#'
#' @param A An `h2matrix`.
#' @param tol Relative Frobenius error allowed, between 0 and 1.
#' @return An `h2matrix`; its `summary()` shows the ranks per level, the
#'   memory before and after, and the error estimate.
#' @examples
#' locs <- matrix(runif(4000), ncol = 2)
#' A <- h2_matrix(locs, gk_kernel("exponential", range = 0.1), backend = "cpu")
#' B <- h2_compress(A, 1e-5)
#' summary(B)
#' @export
h2_compress <- function(A, tol) {
  h2_check_matrix(A)
  if (missing(tol)) stop("`tol` is missing: give the relative error allowed, e.g. 1e-4", call. = FALSE)
  tol <- h2_check_tol(tol)
  h2_transform(A, tol)
}

#' @rdname h2_compress
#' @export
h2_orthogonalize <- function(A) {
  h2_check_matrix(A)
  h2_transform(A, NA_real_)
}

h2_transform <- function(A, tol) {
  before <- h2_bytes(A)
  ranks_before <- h2_level_ranks(A)
  res <- .Call(gk_r_h2_compress, h2_ptr(A), tol, gk_threads(), h2_compress_on_gpu())
  stats <- res[[2L]]
  B <- h2_derived(A, res[[1L]], tol)
  B$compression <- c(list(tol = tol, ranks_before = ranks_before, ranks = h2_level_ranks(B),
                          bytes_before = before, bytes = h2_bytes(B)), stats)
  B
}
