# The compiled-kernel cache: the reduction engine's GPU kernels are compiled
# for the GPU in use the first time a call needs them (NVRTC), and kept on disk.

.onLoad <- function(libname, pkgname) {
  gk_codes_setup()
  gk_jit_setup(gk_cache_dir())
}

# The sources the kernels are compiled from (installed with the package) and
# where compiled kernels are kept, handed to the device layer.
gk_jit_setup <- function(dir) {
  inc <- system.file("include", "gpukernels", package = "gpukernels")
  files <- sort(list.files(inc, pattern = "\\.(h|cuh)$", full.names = TRUE))
  texts <- vapply(files, function(f) readChar(f, file.size(f), useBytes = TRUE), "",
                  USE.NAMES = FALSE)
  .Call(gk_r_jit_configure, dir, as.character(utils::packageVersion("gpukernels")),
        paste0("gpukernels/", basename(files)), texts)
  invisible(dir)
}

#' The cache of compiled GPU kernels
#'
#' The reduction engine ([kernel_reduce()], [knn()], the matrix-free
#' [h2_matrix()] products, the tiled Gaussian-process likelihoods) has one GPU
#' kernel per combination of kernel family, reduction, precision, dimension
#' and work scheme: far too many to compile when the package is installed. Each
#' is compiled the first time a call needs it, for the GPU in use (NVRTC, part
#' of the CUDA toolkit; typically well under a second, a few seconds for the
#' largest, with a message when it takes more than one), and kept:
#' in memory for the rest of the session, and on disk for later sessions.
#'
#' The disk cache is `getOption("gpukernels.cache_dir")` when set, else the
#' environment variable `GK_CACHE_DIR`, else
#' `tools::R_user_dir("gpukernels", "cache")`; `""` keeps kernels in memory
#' only. Entries are keyed by the kernel sources, the package version, the
#' GPU architecture and the CUDA version, so a reinstall of the same version
#' reuses them and a new version, GPU or toolkit compiles its own. A damaged
#' entry is detected (checksum) and compiled again. Several R sessions may
#' share the directory.
#'
#' `gk_warmup()` compiles ahead of time the kernels the common calls use, on
#' several CPU threads, so that no later call waits for the compiler.
#'
#' @return `gk_cache_info()`: a list of class `gk_cache_info` with the
#'   directory, its entries (a data frame: file, bytes, modified), their total
#'   size, and what this session did (`compiled`, `loaded` from disk,
#'   `rebuilt` damaged entries, `compile_seconds`, `in_memory` programs).
#'   `gk_cache_clear()`: the number of entries removed, invisibly.
#'   `gk_warmup()`: the number of kernel specializations checked, invisibly.
#' @examples
#' gk_cache_info()
#' \dontrun{
#' gk_warmup()          # compile the common kernels for this GPU now
#' gk_cache_clear()     # the next calls compile again
#' }
#' @export
gk_cache_info <- function() {
  info <- .Call(gk_r_jit_info)
  files <- if (nzchar(info$dir)) list.files(info$dir, pattern = "\\.gkjit$", full.names = TRUE)
           else character()
  details <- file.info(files, extra_cols = FALSE)
  entries <- data.frame(file = basename(files), bytes = as.numeric(details$size),
                        modified = details$mtime, stringsAsFactors = FALSE)
  structure(c(info[c("dir")], list(entries = entries, bytes = sum(entries$bytes)),
              info[c("compiled", "loaded", "rebuilt", "compile_seconds", "in_memory")]),
            class = "gk_cache_info")
}

#' @rdname gk_cache_info
#' @export
gk_cache_clear <- function() {
  dir <- .Call(gk_r_jit_info)$dir
  files <- if (nzchar(dir)) list.files(dir, pattern = "\\.gkjit$", full.names = TRUE) else character()
  removed <- sum(file.remove(files))
  invisible(removed)
}

#' @export
print.gk_cache_info <- function(x, ...) {
  cat("gpukernels compiled-kernel cache\n")
  cat("  directory:", if (nzchar(x$dir)) x$dir else "(none: kept in memory only)", "\n")
  cat(sprintf("  on disk:   %d entries, %.1f MB\n", nrow(x$entries), x$bytes / 1e6))
  cat(sprintf("  this session: %d compiled (%.1f s), %d read from disk, %d damaged entries rebuilt, %d in memory\n",
              as.integer(x$compiled), x$compile_seconds, as.integer(x$loaded),
              as.integer(x$rebuilt), as.integer(x$in_memory)))
  invisible(x)
}

#' @rdname gk_cache_info
#' @param kernels Kernels to prepare: [gk_kernel()] objects or names.
#' @param dims Point dimensions to prepare.
#' @param precision `"double"`, `"single"` or both.
#' @param reductions Among `"sum"` (also the block-sparse and symmetric sums
#'   of the matrix-free H² products), `"knn"` (the k smallest squared
#'   distances and the nearest neighbour), `"logsumexp"`, `"softmax_sum"`,
#'   `"min"` and `"max"`.
#' @param threads CPU threads compiling side by side (default: all cores).
#' @export
gk_warmup <- function(kernels = list("gaussian", "exponential", gk_kernel("matern", smoothness = 1.5)),
                      dims = 1:3, precision = c("double", "single"),
                      reductions = c("sum", "knn"), threads = NULL) {
  cases <- gk_warmup_cases(kernels, dims, precision, reductions)
  threads <- if (is.null(threads)) .Call(gk_r_omp_threads)
             else gk_check_scalar(threads, "threads", lower = 1, integer = TRUE)
  if (!gk_has_gpu()) {
    message("gk_warmup: no GPU in use, nothing to compile")
    return(invisible(0L))
  }
  .Call(gk_r_reduce_warmup, cases, as.integer(threads), 0L)
  invisible(length(cases))
}

# The reductions gk_warmup() prepares, as the C engine's cases (kernel,
# reduction code, k, single, symmetric, dim, weight columns, block-sparse,
# rows per thread).
gk_warmup_cases <- function(kernels, dims, precision, reductions) {
  kernels <- lapply(if (inherits(kernels, "gk_kernel")) list(kernels) else as.list(kernels),
                    as_gk_kernel)
  if (!is.numeric(dims) || !length(dims) || anyNA(dims) || any(dims < 1 | dims != round(dims))) {
    stop("`dims` must be whole numbers >= 1", call. = FALSE)
  }
  precision <- match.arg(precision, c("double", "single"), several.ok = TRUE)
  reductions <- match.arg(reductions, c("sum", "knn", "logsumexp", "softmax_sum", "min", "max"),
                          several.ok = TRUE)
  cases <- list()
  add <- function(kernel, reduction, k = 1L, cols = 1L, ranged = FALSE, symmetric = FALSE, rows = 1L) {
    for (single in precision == "single") for (dim in dims) {
      cases[[length(cases) + 1L]] <<- list(kernel = kernel, reduction = gk_reductions[[reduction]],
                                           k = as.integer(k), single = single, symmetric = symmetric,
                                           dim = as.integer(dim), cols = as.integer(cols),
                                           ranged = ranged, rows = as.integer(rows))
    }
  }
  sqdist <- gk_kernel("squared_distance")
  if ("knn" %in% reductions) {
    add(sqdist, "kmin", k = 10L)
    add(sqdist, "min")
  }
  for (kernel in kernels) {
    if ("sum" %in% reductions) {
      # One and several weight columns; the gaussian's rows per thread; the
      # block-sparse sums (two-way when symmetric) of the H2 products.
      for (cols in c(1L, 2L)) add(kernel, "sum", cols = cols)
      if (kernel$name == "gaussian") for (rows in c(2L, 4L)) add(kernel, "sum", rows = rows)
      add(kernel, "sum", ranged = TRUE, symmetric = TRUE)
      add(kernel, "sum", cols = 2L, ranged = TRUE)
    }
    for (r in intersect(reductions, c("logsumexp", "softmax_sum", "min", "max"))) add(kernel, r)
  }
  cases
}

# Compiles the reduction kernels of gk_warmup_cases() for compute capability
# `arch` (e.g. 75) without a GPU and without keeping them: a check that the
# installed kernel sources compile (the tests run it where there is no GPU).
gk_jit_check <- function(arch, ..., threads = 2L) {
  cases <- gk_warmup_cases(...)
  .Call(gk_r_reduce_warmup, cases, as.integer(threads), as.integer(arch))
  invisible(length(cases))
}

# Where compiled kernels are kept (see ?gk_cache_info).
gk_cache_dir <- function() {
  dir <- getOption("gpukernels.cache_dir")
  if (is.null(dir)) {
    dir <- Sys.getenv("GK_CACHE_DIR", unset = NA)
    if (is.na(dir)) dir <- tools::R_user_dir("gpukernels", "cache")
  }
  if (!is.character(dir) || length(dir) != 1L || is.na(dir)) {
    stop("`gpukernels.cache_dir` must be one path (or \"\" for no disk cache)", call. = FALSE)
  }
  dir
}
