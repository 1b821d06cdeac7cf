# Accuracy, orthogonalization and compression of H2 matrices
# (src/h2/h2_compress.h), and construction to a tolerance.

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

#' Accuracy of an H2 matrix
#'
#' Measures how far the `h2matrix` `A` is from the exact kernel matrix
#' \eqn{K + \tau^2 I}, with exact products from the tiled reduction engine
#' ([kernel_matvec()], on `A`'s backend).
#'
#' * `probe`: the largest relative error \eqn{\|Ax - A_{\mathcal{H}}x\| /
#'   \|Ax\|} over `probes` mean-zero random vectors (`"normal"` or
#'   `"rademacher"` entries) -- the error a user sees when multiplying by a
#'   random mean-zero vector (its square averages to
#'   \eqn{\|A - A_{\mathcal{H}}\|_F^2 / \|A\|_F^2}). `probes` holds each one,
#'   `frobenius` the pooled estimate of \eqn{\|A - A_{\mathcal{H}}\|_F / \|A\|_F}.
#' * `norm2`: an estimate of \eqn{\|A - A_{\mathcal{H}}\|_2 / \|A\|_2}. A block
#'   Krylov method (`iterations` blocks of `probes` vectors) gives a lower
#'   bound `norm2_lower` of \eqn{\|A - A_{\mathcal{H}}\|_2}; it is divided by
#'   a lower bound of \eqn{\|A\|_2} (power iteration on \eqn{A_{\mathcal{H}}}) and
#'   multiplied by the safety factor 1.5, so that the reported value is not
#'   below the true one (the tests check it against dense matrices).
#'
#' Cost: `probes * iterations` exact products (each \eqn{n^2} kernel
#' evaluations), `iterations = 0` skips the 2-norm. `rows` restricts the
#' probe errors to that many randomly sampled rows, each computed exactly
#' (cheaper for large `n`; the 2-norm is then skipped, and `print()` says the
#' rows were sampled). The default `rows = "auto"` uses every row up to
#' \eqn{n = 5000} and 2000 sampled rows beyond (all rows would cost many times
#' the build: at \eqn{n = 2 \times 10^4} on the CPU, about 8 times); the
#' sampled estimate is of the same products' error, not a bound. At most
#' `nrow(A)` probes are used.
#'
#' @param A An `h2matrix`.
#' @param probes Number of random vectors.
#' @param distribution `"normal"` or `"rademacher"`.
#' @param iterations Krylov blocks for the 2-norm estimate (0: none).
#' @param rows `"auto"` (all rows up to \eqn{n = 5000}, else 2000 sampled
#'   rows), `NULL` (all rows) or the number of rows sampled.
#' @return An object of class `h2_error`: a list with `probe`, `probes`,
#'   `frobenius`, `norm2`, `norm2_lower`, `distribution`, `n_probes`,
#'   `iterations`, `rows` and `sampled` (whether the rows were sampled).
#' @examples
#' A <- h2_matrix(matrix(runif(2000), ncol = 2), gk_kernel("exponential", range = 0.1),
#'                backend = "cpu")
#' h2_error(A)
#' @export
h2_error <- function(A, probes = 4, distribution = c("normal", "rademacher"), iterations = 4,
                     rows = "auto") {
  h2_check_matrix(A)
  gk_check_scalar(probes, "probes", lower = 1, integer = TRUE)
  gk_check_scalar(iterations, "iterations", lower = 0, integer = TRUE)
  distribution <- gk_match_choice(distribution, c("normal", "rademacher"), "distribution")
  n <- nrow(A$locs)
  # More probes than rows add nothing (and the Krylov block would not be square)
  probes <- min(probes, n)
  sampled <- NULL
  if (identical(rows, "auto")) {
    rows <- if (n > h2_error_all_rows_max) h2_error_sampled_rows else NULL
  }
  if (!is.null(rows)) {
    gk_check_scalar(rows, "rows", lower = 1, integer = TRUE)
    if (rows < n) {
      sampled <- sort(sample.int(n, rows))
      iterations <- 0
    }
  }
  draw <- function(k) {
    if (distribution == "normal") matrix(stats::rnorm(n * k), n, k)
    else matrix(sample(c(-1, 1), n * k, replace = TRUE), n, k)
  }
  exact <- function(X, at = NULL) {
    x <- if (is.null(at)) A$locs else A$locs[at, , drop = FALSE]
    Y <- kernel_matvec(x, A$locs, X, A$kernel, backend = A$backend)
    Y <- matrix(Y, ncol = ncol(X))
    Y + A$nugget * (if (is.null(at)) X else X[at, , drop = FALSE])
  }
  X <- draw(probes)
  AX <- exact(X, sampled)
  HX <- h2_multiply(A, X)
  if (!is.null(sampled)) HX <- HX[sampled, , drop = FALSE]
  EX <- AX - HX
  errs <- sqrt(colSums(EX^2) / colSums(AX^2))
  out <- list(probe = max(errs), probes = errs, frobenius = sqrt(sum(EX^2) / sum(AX^2)),
              norm2 = NA_real_, norm2_lower = NA_real_, distribution = distribution,
              n_probes = probes, iterations = iterations, rows = if (is.null(sampled)) n else rows,
              sampled = !is.null(sampled))
  if (iterations > 0) out[c("norm2", "norm2_lower")] <- h2_norm2_error(A, X, EX, iterations, exact)
  structure(out, class = "h2_error")
}

h2_norm2_safety <- 1.5

# h2_error(rows = "auto"): every row up to this n; beyond, this many sampled
# rows (the exact products cost n^2 per probe and Krylov vector: at n = 2e4 on
# the CPU, 8 times the build; 2000 rows without the 2-norm cost about 1/40).
h2_error_all_rows_max <- 5000
h2_error_sampled_rows <- 2000

# Block Krylov lower bound of ||E||_2 for the symmetric E = A - A_H, from the
# block X and its product EX: sigma_max(E V) for an orthonormal basis V of
# span(X, EX, ..., E^(it-1) X) (each column of V is multiplied exactly once).
h2_norm2_error <- function(A, X, EX, iterations, exact) {
  qx <- qr(X)
  V <- qr.Q(qx)
  EV <- EX %*% solve(qr.R(qx))     # E V = E X R^-1
  Vall <- V
  EVall <- EV
  for (it in seq_len(iterations - 1L)) {
    W <- EV - Vall %*% crossprod(Vall, EV)
    W <- W - Vall %*% crossprod(Vall, W)   # twice is enough
    qw <- qr(W)
    keep <- abs(diag(qr.R(qw))) > 1e-12 * max(abs(diag(qr.R(qw))), 1e-300)
    if (!any(keep)) break
    V <- qr.Q(qw)[, keep, drop = FALSE]
    EV <- exact(V) - h2_multiply(A, V)
    Vall <- cbind(Vall, V)
    EVall <- cbind(EVall, EV)
  }
  lower_e <- sqrt(max(eigen(crossprod(EVall), symmetric = TRUE, only.values = TRUE)$values, 0))
  # ||A||_2 >= ||A_H v|| / ||v|| after power iterations on A_H, less ||E||_2.
  v <- stats::rnorm(nrow(X))
  for (i in 1:30) {
    w <- drop(h2_multiply(A, v))
    norm_a <- sqrt(sum(w^2) / sum(v^2))
    v <- w / sqrt(sum(w^2))
  }
  denom <- max(norm_a - h2_norm2_safety * lower_e, norm_a * 1e-3)
  c(h2_norm2_safety * lower_e / denom, lower_e / norm_a)
}

#' @export
print.h2_error <- function(x, ...) {
  cat(sprintf("<h2_error> relative error of the H2 matrix, %d %s probe%s on %d %srows\n",
              x$n_probes, x$distribution, if (x$n_probes != 1) "s" else "", x$rows,
              if (isTRUE(x$sampled)) "randomly sampled " else ""))
  if (isTRUE(x$sampled)) {
    cat("  (an estimate from the sampled rows, exact products on them; no 2-norm bound:",
        "use rows = NULL for all rows)\n")
  }
  cat(sprintf("  products ||Ax - A_H x|| / ||Ax||: max %.3g over the probes (Frobenius estimate %.3g)\n",
              x$probe, x$frobenius))
  if (!is.na(x$norm2)) {
    cat(sprintf("  2-norm ||A - A_H|| / ||A||: <= %.3g (estimate; Krylov lower bound %.3g, %d blocks)\n",
                x$norm2, x$norm2_lower, x$iterations))
  }
  invisible(x)
}

# h2_matrix(tol = ): raise the Chebyshev order (at the given eta, else 3)
# until the measured N(0, 1) error meets tol, and compress the order found,
# compressed products being the faster (h2_tol_compress: the errors of the
# order and of the compression add at most, and a compressed matrix is kept
# only if its measured error meets tol). storage = "stored" builds stored
# forms: an order within tol / 2 is compressed to tol / 2; when no higher
# order is built (it would not fit the budget or cannot be built), the most
# accurate order within tol is compressed by what tol leaves. "on_the_fly"
# builds on-the-fly forms (bases stored, blocks evaluated in every product:
# O(nk) memory, so accuracy is limited by time, not memory) and compresses
# them alike (h2_tol_search's compressed_on_the_fly: an order within 0.75 tol
# is compressed by what tol leaves at once; at most h2_tol_fly_orders orders
# within 10 tol, none once the error stops improving); the result stores its
# compressed couplings and, on the GPU, keeps its dense blocks on the fly.
# "auto" starts stored and goes on on the fly from the first order whose
# stored form would not fit the budget or cannot be built (a stored order
# within tol is compressed by what tol leaves first). On the fly, when no
# compressed form meets tol (or a compression fails, e.g. for memory), the
# uncompressed forms are searched (h2_tol_search's on_the_fly): at each eta
# (the given one, else 3, 2 and 1.5) the lowest order that meets 0.8 tol, of
# those the one with the fastest predicted product. The tree (and so the
# number of blocks) does not depend on the order, so the memory of the next
# order is known before it is built. At n = 2^20 in 3D (exponential, range
# 0.2), tol = 1e-3 takes order 5 or 6 on the fly (order 5 stored, 119 GB,
# does not fit an H100), compressed: 2.3-6.4 GB, 4.9-6.3 ms per product.
h2_matrix_to_tol <- function(locs, kernel, nugget, leaf_size, eta, order, precision, backend,
                             tol, storage, etas = eta) {
  # Every matrix built on the way is freed on return, not when R's garbage
  # collector gets to it: at n = 2^20 in 3D a stored order takes 40 GB of the
  # GPU, which the search would otherwise hold after it returns.
  made <- new.env(parent = emptyenv())
  made$all <- list()
  track <- function(A) {
    made$all[[length(made$all) + 1L]] <- A
    A
  }
  on.exit({
    keep <- if (is.null(result)) NULL else .subset2(result, "native")
    for (A in made$all) if (!identical(.subset2(A, "native"), keep)) gk_free(A)
  })
  result <- NULL
  result <- h2_tol_search(locs, kernel, nugget, leaf_size, eta, order, precision, backend, tol,
                          storage, etas, track)
  result
}

# Orders within 10 tol the compressed search on the fly builds at most: the
# first and 3 more (at n = 2^20 in 3D, orders 5-8 on the fly take 5, 14, 32
# and 68 GB of the GPU, 31, 94, 218 and about 450 ms per product).
h2_tol_fly_orders <- 4L

h2_tol_search <- function(locs, kernel, nugget, leaf_size, eta, order, precision, backend, tol,
                          storage, etas, track) {
  d <- ncol(locs)
  orders <- if (is.null(order)) (if (d == 2L) 4:16 else 3:10) else order
  budget <- h2_tol_budget(backend)
  rows <- min(nrow(locs), 2000L)
  # An uncompressed on-the-fly form must meet tol itself (a compressed form
  # has its measured error checked after the compression): twice the probes,
  # since the error of one N(0, 1) probe scatters by a factor of 2-3 around
  # the Frobenius error, and 0.8 tol, since every eta tried is one more chance
  # to measure an error near tol below it. On-the-fly forms are measured so
  # for both searches (the compressed one's are kept for the uncompressed one).
  measure <- function(A, probes = 2L) h2_error(A, probes = probes, iterations = 0, rows = rows)
  # Order o at eta e in `form`, or a condition of class "h2_unbuilt" saying why
  # not. The blocks' memory follows from any built order of the same points.
  build <- function(o, form, previous, e = eta) {
    if (!is.null(previous)) {
      need <- h2_order_bytes(previous$info, o, form)
      if (need > budget$bytes) {
        return(h2_unbuilt(sprintf("order %d %s would need %s of %s", o, h2_form_words(form),
                                  h2_format_bytes(need), budget$words)))
      }
    }
    tryCatch(track(h2_matrix(locs, kernel, nugget = nugget, leaf_size = leaf_size, eta = e,
                             order = o, precision = precision, backend = backend,
                             storage = form)),
             error = function(err) {
               h2_unbuilt(sprintf("order %d %s cannot be built (%s)", o, h2_form_words(form),
                                  conditionMessage(err)), err)
             })
  }
  # A matrix superseded by a more accurate one is freed at once rather than on
  # return: at n = 2^20 in 3D the stored orders 3 and 4 hold 17 and 40 GB of
  # the GPU that the on-the-fly orders after them need. (Should it be wanted
  # after all, e.g. returned, it is rebuilt on first use.)
  release <- function(built) if (!is.null(built)) gk_free(built$A)
  # The orders built (or found unbuildable: h2_unbuilt) on the fly at eta by
  # the compressed search, by order, for the uncompressed search.
  fly_at_eta <- new.env(parent = emptyenv())
  # Compressed on the fly, at eta, from order `first` (`previous`: the stored
  # order below it, or NULL). An order within tol / 2 is compressed to tol / 2.
  # An order within 0.75 tol is compressed by what tol leaves
  # (h2_tol_compress_rest) at once rather than the next order built: the
  # results are alike (1777 points in 3D, tol = 1e-3: order 5, error 6.2e-4,
  # compressed to 3.8e-4 has ranks 20-22 and an error of 7.6e-4; order 6
  # compressed to 5e-4, ranks 19-20 and 6.3e-4), and the next order costs a
  # build and a larger compression (rank 216 against 125). An order within tol
  # but not 0.75 tol, which would be compressed to less than tol / 4 (larger
  # ranks), is remembered and compressed so only when the next order is not
  # built or gives no compressed form meeting tol. One order at most is built
  # beyond the first within tol. The order is raised at most
  # h2_tol_fly_orders - 1 times from the first order within 10 tol (the
  # orders below are the cheaper ones, and the uncompressed search would
  # build them too; in 2D an order gains only a factor 2.5-5 near 1e-5),
  # but for the one after an order remembered, and no more once the error
  # stops improving or a compression fails (e.g. out of memory: a higher
  # order needs more). Returns the chosen matrix, else list(why: why no
  # compressed form was taken, stopped: why no higher order was built).
  compressed_on_the_fly <- function(first, previous, why) {
    last <- previous       # the order below: its memory and its error
    within <- NULL         # the order within tol remembered (not 0.75 tol)
    first_within <- NULL   # the first order within tol
    stopped <- NULL
    missed <- NULL
    counted <- 0L          # orders built within 10 tol
    for (o in orders[orders >= first]) {
      if (counted >= h2_tol_fly_orders && is.null(within)) {
        stopped <- sprintf("the compressed search builds at most %d orders within 10 tol",
                           h2_tol_fly_orders)
        break
      }
      A <- build(o, "on_the_fly", last)
      if (inherits(A, "h2_unbuilt")) {
        fly_at_eta[[as.character(o)]] <- A
        stopped <- conditionMessage(A)
        break
      }
      info <- h2_info(A)
      built <- list(A = A, order = o, eta = eta, form = "on_the_fly", error = measure(A, 4L),
                    ms = info$ms_on_the_fly, info = info)
      rm(A)
      fly_at_eta[[as.character(o)]] <- built
      err <- built$error$probe
      if (err < 10 * tol) counted <- counted + 1L
      # superseded: the uncompressed search would return a more accurate order
      if (!is.null(last) && err < last$error$probe && !identical(last, within)) release(last)
      if (err <= tol / 2) {
        done <- h2_tol_compress(built, tol, tol / 2, measure, why, track)
        if (inherits(done, "h2matrix")) return(done)
        missed <- c(missed, conditionMessage(done))
        break
      }
      if (err < tol) {
        first_within <- first_within %||% o
        if (err <= 0.75 * tol) {   # what tol leaves is at least tol / 4
          done <- h2_tol_compress_rest(built, tol, measure, why, track)
          if (inherits(done, "h2matrix")) return(done)
          missed <- c(missed, conditionMessage(done))
          if (!is.null(done$parent)) break   # the compression failed
        } else if (is.null(within) || err < within$error$probe) {
          within <- built
        }
      }
      if (!is.null(last) && err > 0.9 * last$error$probe) {
        stopped <- sprintf("the error stopped improving (order %d: %.3g, order %d: %.3g)",
                           last$order, last$error$probe, o, err)
        break
      }
      if (!is.null(first_within) && o > first_within) break
      last <- built
    }
    if (!is.null(within)) {
      done <- h2_tol_compress_rest(within, tol, measure, c(why, stopped), track)
      if (inherits(done, "h2matrix")) return(done)
      missed <- c(missed, conditionMessage(done))
    }
    if (is.null(missed)) {
      missed <- sprintf("no order on the fly at eta %g was within tol%s", eta,
                        if (is.null(stopped)) "" else sprintf(" (%s)", stopped))
    }
    list(why = paste(missed, collapse = "; "), stopped = stopped)
  }
  # Uncompressed on the fly: at each eta (the given one, else 3, 2 and 1.5),
  # the lowest order from `first` that meets 0.8 tol; of those, the one with
  # the fastest product (the storage model's prediction,
  # h2_info()$ms_on_the_fly). A smaller eta evaluates more pairs per product
  # but reaches a given error at a lower order: at n = 2^20 in 3D, 1e-4 takes
  # order 7 (218 ms per product) at eta 3 and order 5 (38 ms) at eta 2. An
  # order predicted slower than a form already found ends that eta's search.
  # The orders the compressed search built at eta are not built again.
  on_the_fly <- function(first, previous) {
    found <- NULL
    best <- previous
    stopped <- NULL
    failed <- NULL
    for (e in etas) {
      for (o in orders[orders >= (if (e == eta) first else orders[1L])]) {
        built <- if (e == eta) fly_at_eta[[as.character(o)]]
        if (is.null(built)) built <- build(o, "on_the_fly", best, e)
        if (inherits(built, "h2_unbuilt")) {
          stopped <- conditionMessage(built)
          failed <- built
          break
        }
        if (inherits(built, "h2matrix")) {
          info <- h2_info(built)
          built <- list(A = built, order = o, eta = e, form = "on_the_fly", error = NULL,
                        ms = info$ms_on_the_fly, info = info)
        }
        if (!is.null(found) && built$ms >= found$ms) break
        if (is.null(built$error)) built$error <- measure(built$A, 4L)
        if (built$error$probe <= 0.8 * tol) {
          found <- built
          break
        }
        if (is.null(best) || built$error$probe <= best$error$probe) best <- built
      }
    }
    if (!is.null(found) && length(etas) > 1L) {
      found$why <- sprintf("predicted %.3g ms per product, the fastest on-the-fly form that meets tol",
                           found$ms)
    }
    if (is.null(found) && is.null(best)) stop(failed$parent %||% failed)   # nothing could be built
    list(found = found, best = best, stopped = stopped)
  }
  # On the fly from order `first`: compressed, else uncompressed.
  finish_on_the_fly <- function(first, previous, why) {
    compressed <- compressed_on_the_fly(first, previous, why)
    if (inherits(compressed, "h2matrix")) return(compressed)
    fly <- on_the_fly(first, previous)
    if (!is.null(fly$found)) {
      return(h2_tol_chosen(fly$found, tol, paste(c(why, paste("uncompressed:", compressed$why),
                                                   fly$found$why), collapse = "; ")))
    }
    h2_tol_missed(fly$best, tol, fly$stopped %||% compressed$stopped %||% why[1L])
  }
  if (storage == "on_the_fly") return(finish_on_the_fly(orders[1L], NULL, "as requested"))
  best <- NULL      # the most accurate stored matrix built: list(A, order, eta, form, error)
  stopped <- NULL   # why no higher order was built
  for (o in orders) {
    A <- build(o, "stored", best)
    if (inherits(A, "h2_unbuilt")) {
      if (is.null(best) && storage != "auto") stop(A$parent %||% A)
      stopped <- conditionMessage(A)
      if (storage == "auto") {
        done <- h2_tol_compress_rest(best, tol, measure, stopped, track)
        if (inherits(done, "h2matrix")) return(done)
        return(finish_on_the_fly(o, best, c(stopped, if (!is.null(done)) conditionMessage(done))))
      }
      break
    }
    built <- list(A = A, order = o, eta = eta, form = "stored", error = measure(A),
                  info = h2_info(A))
    rm(A)
    if (is.null(best) || built$error$probe <= best$error$probe) {
      release(best)
      best <- built
    }
    if (built$error$probe <= tol / 2) {
      done <- h2_tol_compress(built, tol, tol / 2, measure, NULL, track)
      if (inherits(done, "h2matrix")) return(done)
      return(h2_tol_chosen(built, tol, paste("uncompressed:", conditionMessage(done))))
    }
  }
  # No order met tol / 2; a stored form within tol still does, compressed by
  # what is left.
  done <- h2_tol_compress_rest(best, tol, measure, stopped, track)
  if (inherits(done, "h2matrix")) return(done)
  h2_tol_missed(best, tol, stopped)
}

# No form met tol: a warning, and the most accurate matrix built.
h2_tol_missed <- function(best, tol, stopped) {
  if (best$error$probe <= tol) return(h2_tol_chosen(best, tol, stopped))
  if (is.null(stopped)) {
    stopped <- sprintf("the highest order tried (%d) gives a measured error of %.3g", best$order,
                       best$error$probe)
    advice <- "use a smaller `eta`"
  } else {
    advice <- if (best$form == "stored") {
      paste("for more accuracy use storage = \"auto\" (far less memory), a larger `eta`,",
            "single precision or the CPU")
    } else {   # the bases and transfers: fewer clusters, or smaller entries
      "for more accuracy use a larger `leaf_size`, single precision or the CPU"
    }
  }
  warning(sprintf(paste0("h2_matrix(tol = %g): %s; returning order %d %s with a measured error ",
                         "of %.3g; %s"),
                  tol, stopped, best$order, h2_form_words(best$form), best$error$probe, advice),
          call. = FALSE)
  h2_tol_chosen(best, tol, stopped, met = FALSE)
}

# The etas h2_matrix(tol = ) tries on the fly when none is given.
h2_tol_etas <- c(3, 2, 1.5)

`%||%` <- function(a, b) if (is.null(a)) b else a   # base R has it from 4.4.0

h2_unbuilt <- function(message, parent = NULL) {
  structure(class = c("h2_unbuilt", "error", "condition"),
            list(message = message, call = NULL, parent = parent))
}

# Words for a form built by h2_matrix(tol = ) ("stored" or "on_the_fly"),
# compressed or not. A compressed on-the-fly matrix stores its compressed
# couplings and keeps its dense blocks on the fly (on either backend).
h2_form_words <- function(form, compressed = FALSE) {
  if (form != "on_the_fly") return(if (compressed) "stored, compressed" else "stored")
  if (compressed) "on the fly, compressed (dense blocks on the fly, couplings compressed)" else "on the fly"
}

h2_format_bytes <- function(bytes) {
  if (bytes >= 1e9) sprintf("%.1f GB", bytes / 1e9) else sprintf("%.1f MB", bytes / 1e6)
}

# The memory one order's matrix may use in h2_matrix(tol = ), and its words for
# messages: options(gpukernels.h2_tol_budget) bytes, else 80% of the free GPU
# memory, unlimited on the CPU.
h2_tol_budget <- function(backend) {
  bytes <- getOption("gpukernels.h2_tol_budget")
  if (!is.null(bytes)) {
    if (!is.numeric(bytes) || length(bytes) != 1L || is.na(bytes) || bytes <= 0) {
      stop("option gpukernels.h2_tol_budget must be a number of bytes > 0 (or NULL)",
           call. = FALSE)
    }
    return(list(bytes = bytes, words = sprintf("memory, %s allowed by gpukernels.h2_tol_budget",
                                               h2_format_bytes(bytes))))
  }
  if (backend != "gpu") return(list(bytes = Inf, words = "memory"))
  free <- h2_gpu_free_budget()
  list(bytes = free, words = sprintf("GPU memory, %s free", h2_format_bytes(free)))
}

# Bytes of the current GPU's free memory that may be used: the budget every
# engine keeps to (GK_MEMORY_BUDGET_FRACTION in src/device/gk_device.h).
h2_gpu_free_budget <- function() {
  info <- gk_info()
  0.8 * info$devices$free_memory[info$current_device]
}

# Bytes of order o's matrix in `form`, from `info` of the same points at
# another order: the blocks are the same, the ranks grow as order^d. On the
# fly: bases, transfers and the Chebyshev nodes of every cluster.
h2_order_bytes <- function(info, o, form) {
  grow <- (o / info$order)^info$dim
  b <- info$bytes_per_entry
  bases <- b * (info$basis_entries * grow + info$transfer_entries * grow^2)
  if (form == "on_the_fly") return(bases + 8 * info$dim * info$nodes * info$rank * grow)
  bases + b * (info$coupling_entries * grow^2 + info$dense_entries)
}

# `built` (stored or on the fly) compressed to ctol (its errors and the
# compression's add at most), if the measured error of the result meets tol;
# else an h2_unbuilt condition saying why not (the compressed forms missed
# tol, or the compression failed, e.g. out of memory).
h2_tol_compress <- function(built, tol, ctol, measure, why, track = identity) {
  words <- h2_form_words(built$form)
  room <- h2_compress_room(built$A)
  if (!is.null(room)) {
    return(h2_unbuilt(sprintf("order %d %s not compressed: it would need about %s more GPU memory, %s",
                              built$order, words, h2_format_bytes(room$need), room$words)))
  }
  errors <- numeric()
  tos <- c(ctol, ctol / 4)   # rarely, the first misses: compress less
  for (to in tos) {
    B <- tryCatch(track(h2_compress(built$A, to)), error = function(err) err)
    if (inherits(B, "error")) {
      return(h2_unbuilt(sprintf("order %d %s compressed to %.3g failed (%s)", built$order, words,
                                to, conditionMessage(B)), B))
    }
    err <- measure(B)
    if (err$probe <= tol) {
      B$compression$tol_requested <- tol
      before <- sprintf("error %.3g before compression to %.3g", built$error$probe, to)
      return(h2_tol_chosen(list(A = B, order = built$order, form = built$form, error = err), tol,
                           paste(c(before, why), collapse = "; ")))
    }
    errors <- c(errors, err$probe)
    gk_free(B)   # not returned
  }
  h2_unbuilt(sprintf("order %d %s compressed to %s missed tol (measured %s)", built$order, words,
                     paste(sprintf("%.3g", tos), collapse = " and "),
                     paste(sprintf("%.3g", errors), collapse = " and ")))
}

# NULL when the GPU compression of A should fit the GPU's free memory, else
# what it would need and the free memory's words. The compression's
# workspaces (the orthogonalization's projections and working copy, chunks of
# couplings of at most 4 GB and 1 GB of others: src/h2/h2_compress_cuda.cu)
# come to about A's bases, transfers and nodes again, plus 5 GB (its stored
# blocks are read or shared, not copied). Checked before the attempt: at 2^20
# in 3D the compression of order 7 on the fly (those: 51 GB) ran 75 s until an
# allocation failed.
h2_compress_room <- function(A) {
  info <- h2_info(A)
  if (!info$gpu || !h2_compress_on_gpu()) return(NULL)
  need <- info$bytes_per_entry * (info$basis_entries + info$transfer_entries) +
    info$on_the_fly_bytes + 5e9
  # the free memory itself: gpukernels.h2_tol_budget bounds the matrices built
  free <- h2_gpu_free_budget()
  if (need <= free) return(NULL)
  list(need = need, words = sprintf("%s free", h2_format_bytes(free)))
}

# `best` compressed by what tol leaves, if its error is below tol
# (h2_tol_compress's result); else NULL.
h2_tol_compress_rest <- function(best, tol, measure, why, track = identity) {
  if (is.null(best) || best$error$probe >= tol) return(NULL)
  h2_tol_compress(best, tol, tol - best$error$probe, measure, why, track)
}

# The result of h2_matrix(tol = ): the matrix `chosen` holds, with its measured
# error and what was chosen and why (print() shows it).
h2_tol_chosen <- function(chosen, tol, why, met = TRUE) {
  A <- chosen$A
  compressed <- !is.null(A$compression)
  storage <- h2_form_words(chosen$form, compressed)
  A$tol_choice <- list(tol = tol, order = as.integer(chosen$order), eta = A$eta,
                       storage = storage, why = why, met = met)
  h2_with_accuracy(A, chosen$error)
}

h2_print_tol_choice <- function(ch) {
  cat(sprintf("  chosen for tol = %g%s: order %d, eta %g, %s%s\n", ch$tol,
              if (ch$met) "" else " (not met)", ch$order, ch$eta %||% NA_real_, ch$storage,
              if (is.null(ch$why)) "" else sprintf(" (%s)", ch$why)))
}

h2_with_accuracy <- function(A, err) {
  A$accuracy <- err
  A
}

h2_print_compression <- function(cmp) {
  mb <- function(b) sprintf("%.1f MB", sum(b) / 2^20)
  used <- which(cmp$ranks > 1)
  if (!length(used)) used <- seq_along(cmp$ranks)
  ranks <- function(r) paste(r[used], collapse = " ")
  if (is.na(cmp$tol)) {
    cat(sprintf("  orthogonalized in %.3f s; ranks per level (levels %d-%d): %s\n", cmp$seconds,
                min(used) - 1, max(used) - 1, ranks(cmp$ranks)))
  } else {
    cat(sprintf("  compressed to tol = %g in %.3f s: Frobenius error estimate %.3g\n", cmp$tol,
                cmp$seconds, cmp$error_frobenius))
    cat(sprintf("    ranks per level (levels %d-%d): %s (before: %s)\n", min(used) - 1,
                max(used) - 1, ranks(cmp$ranks), ranks(cmp$ranks_before)))
  }
  cat(sprintf("    memory: %s before, %s after (low rank %s -> %s)\n", mb(cmp$bytes_before),
              mb(cmp$bytes), mb(cmp$bytes_before[["low_rank"]]), mb(cmp$bytes[["low_rank"]])))
}
