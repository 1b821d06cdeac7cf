#' Matrices kept on the GPU
#'
#' Uploads a numeric matrix to GPU memory once, so that repeated reductions on
#' the same points (or weights) do not upload them again. A device matrix is
#' accepted by [kernel_reduce()], [kernel_matvec()] and [knn()] wherever an R
#' matrix is; `as.matrix()` brings it back. It lives on the GPU selected when
#' it was made (see [gk_set_device()]), and reductions that use it run there.
#' The GPU memory is freed when the object is garbage collected or released
#' with [gk_free()].
#'
#' A device matrix also keeps its values in R (the matrix `x` itself, not a
#' copy, when `x` is already a double matrix), so that it survives
#' [saveRDS()] and [gk_free()]: after [readRDS()] the values are uploaded again
#' on first use, to the GPU selected then, and where there is no GPU the matrix
#' is used on the CPU (reductions with `backend = "cpu"` or `"auto"`,
#' `as.matrix()`) with the values stored on the GPU (rounded to single precision
#' for `precision = "single"`), so that products are the same as before saving.
#'
#' A column whose values all lie within a factor 2 of its first value (points
#' far from the origin, relative to their spread) is stored minus that value,
#' which is kept in double precision and added back by `as.matrix()` and
#' reductions: differences of such points keep their digits (in single
#' precision too, which then rounds the centred values), and the double values
#' come back exactly.
#'
#' @param x A numeric matrix (a vector is one column), finite.
#' @param precision `"double"` (the default) or `"single"`: how the values are
#'   stored on the GPU. Either can be used in reductions of either precision.
#' @return An object of class `gk_device_matrix`.
#' @examples
#' if (gk_has_gpu()) {
#'   y <- gk_device_matrix(matrix(runif(3000), 1000, 3))
#'   dim(y)
#'   a <- kernel_matvec(matrix(runif(30), 10, 3), y, rep(1, 1000))
#' }
#' @export
gk_device_matrix <- function(x, precision = "double") {
  x <- gk_check_points(x, "x", allow_empty = TRUE)
  precision <- gk_check_precision(precision)
  gk_backend("gpu")
  device_matrix_from(list(values = x, dim = dim(x), precision = precision))
}

# The device matrix of dm (values, dim, precision and, optionally, centre =
# FALSE), uploaded now.
device_matrix_from <- function(dm) {
  structure(c(list(native = gk_native_new(device_matrix_upload(dm))), dm),
            class = "gk_device_matrix")
}

# Uploads the values of a device matrix to the selected GPU (R/native.R).
device_matrix_upload <- function(dm) {
  if (!gk_has_gpu()) {
    stop("this device matrix was saved on a machine with a GPU and there is none here: ",
         "use it with backend = \"cpu\"", call. = FALSE)
  }
  .Call(gk_r_device_matrix, .subset2(dm, "values"), .subset2(dm, "precision") == "single",
        !isFALSE(.subset2(dm, "centre")))
}

# A block of vectors kept on the GPU for the package's own products and
# solvers (the GP probes): x, a finite double matrix the package made, is
# uploaded without the user-facing checks (finite by construction: a pass
# over its 5e7 values would add to every evaluation) and without centring,
# so that C glue can copy the buffer as it is
# (gk_r_rhs_block in src/r_reduce.c).
gk_device_block <- function(x) {
  stopifnot(is.double(x), is.matrix(x))
  device_matrix_from(list(values = x, dim = dim(x), precision = "double", centre = FALSE))
}

# The live GPU copy of a device matrix, uploaded again after readRDS() or gk_free().
gk_device_matrix_ptr <- function(x) gk_native_ptr(x, device_matrix_upload)

#' @export
gk_free.gk_device_matrix <- function(x) {
  .Call(gk_r_device_matrix_free, .subset2(x, "native")$ptr)
  invisible(x)
}

#' @export
dim.gk_device_matrix <- function(x) unclass(x)$dim

#' @export
as.matrix.gk_device_matrix <- function(x, ...) {
  # The GPU copy when there is one; else the values kept in R, as stored on the GPU.
  if (gk_native_alive(x)) return(.Call(gk_r_device_matrix_download, gk_device_matrix_ptr(x)))
  values <- .subset2(x, "values")
  if (.subset2(x, "precision") == "single") values <- gk_stored_single(values)
  values
}

# The values of a single-precision device matrix as the GPU stores them, in
# double: columns far from the origin minus their centre (the C rule, so
# that both agree), rounded to float, the centre added back.
gk_stored_single <- function(values) {
  centre <- .Call(gk_r_device_matrix_centre, values)
  for (k in seq_along(centre)) {
    values[, k] <- if (centre[k] == 0) gk_round_to_float(values[, k]) else
      gk_round_to_float(values[, k] - centre[k]) + centre[k]
  }
  values
}

# Doubles rounded to the nearest float, as a device matrix stores them.
gk_round_to_float <- function(x) {
  readBin(writeBin(as.double(x), raw(), size = 4L), "double", length(x), size = 4L)
}

#' @export
print.gk_device_matrix <- function(x, ...) {
  d <- dim(x)
  cat("<gk_device_matrix> ", d[1L], " x ", d[2L], " (", unclass(x)$precision, ") ",
      if (gk_native_alive(x)) "on the GPU" else "not on a GPU now (uploaded when used)", "\n",
      sep = "")
  invisible(x)
}

# What the C glue takes: a double matrix, or a device matrix's external pointer.
gk_operand <- function(x) if (inherits(x, "gk_device_matrix")) gk_device_matrix_ptr(x) else x

gk_operand_dim <- function(x) if (inherits(x, "gk_device_matrix")) unclass(x)$dim else dim(x)
