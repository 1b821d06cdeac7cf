#' Matrices kept on the GPU
#'
#' Uploads a numeric matrix to GPU memory once, so that repeated reductions on
#' the same points (or weights) do not upload them again. A device matrix is
#' accepted by [kernel_reduce()], [kernel_matvec()] and [knn()] wherever an R
#' matrix is; `as.matrix()` brings it back. It lives on the GPU selected when
#' it was made (see [gk_set_device()]), and reductions that use it run there.
#' The GPU memory is freed when the object is garbage collected. Device matrices do not survive `saveRDS()` or
#' the end of the R session.
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
  ptr <- .Call(gk_r_device_matrix, x, precision == "single")
  structure(list(ptr = ptr, dim = dim(x), precision = precision), class = "gk_device_matrix")
}

#' @export
dim.gk_device_matrix <- function(x) unclass(x)$dim

#' @export
as.matrix.gk_device_matrix <- function(x, ...) {
  .Call(gk_r_device_matrix_download, unclass(x)$ptr)
}

#' @export
print.gk_device_matrix <- function(x, ...) {
  d <- dim(x)
  cat("<gk_device_matrix> ", d[1L], " x ", d[2L], " (", unclass(x)$precision,
      ") on the GPU\n", sep = "")
  invisible(x)
}

# What the C glue takes: a double matrix, or a device matrix's external pointer.
gk_operand <- function(x) if (inherits(x, "gk_device_matrix")) unclass(x)$ptr else x

gk_operand_dim <- function(x) if (inherits(x, "gk_device_matrix")) unclass(x)$dim else dim(x)
