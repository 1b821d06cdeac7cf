#' Gradients of a formula's kernel sums
#'
#' For a kernel written with [gk_formula()], the gradient of
#' \deqn{S = \sum_i \sum_e u_{ie} \sum_j F(x_i, y_j) b_{je}}
#' (the `"sum"` reduction of [kernel_reduce()], weighted by `u`) with respect
#' to the points `x`, the points `y`, the weights `b` or the formula's
#' parameters. The derivatives of \eqn{F} are taken symbolically by R's
#' [D()] (with the chain rule for `abs`, `pmin`, `pmax`, `ifelse` and the
#' step functions, whose derivative is taken as 0), translated and compiled as
#' the formula is, and reduced by the same engines:
#' \describe{
#'   \item{`x`}{\eqn{\partial S / \partial x_{ik} = \sum_e u_{ie} \sum_j
#'     \partial_{x_k} F(x_i, y_j) b_{je}}: one reduction per coordinate.}
#'   \item{`y`}{\eqn{\partial S / \partial y_{jk} = \sum_e b_{je} \sum_i
#'     \partial_{y_k} F(x_i, y_j) u_{ie}}: the transposed reductions.}
#'   \item{`b`}{\eqn{\partial S / \partial b_{je} = \sum_i F(x_i, y_j) u_{ie}}.}
#'   \item{a parameter}{\eqn{\partial S / \partial p = \sum_{ie} u_{ie} \sum_j
#'     \partial_p F(x_i, y_j) b_{je}}.}
#' }
#' Where \eqn{F} is not differentiable (`sqrt(sqdist(x, y))` at \eqn{x = y})
#' the derivative is what the formula of [D()] gives there, possibly `NaN`.
#'
#' @inheritParams kernel_reduce
#' @param kernel A formula from [gk_formula()].
#' @param b Weights: a vector or matrix with `nrow(y)` rows; `NULL` means ones.
#' @param wrt What to differentiate with respect to: any of `"x"`, `"y"`,
#'   `"b"` and the names of the formula's parameters.
#' @param u The weights of the sum over the results (`nrow(x)` rows, as many
#'   columns as `b`); `NULL` means ones.
#' @return A list named by `wrt`: matrices the shape of `x`, `y` and `b` (as a
#'   matrix), and single numbers for parameters.
#' @examples
#' \dontrun{
#' k <- gk_formula(exp(-sqdist(x, y) / (2 * s^2)), s = 0.3)
#' x <- matrix(runif(200), 100, 2)
#' g <- kernel_grad(x, x, rnorm(100), kernel = k, wrt = c("x", "s"))
#' }
#' @export
kernel_grad <- function(x, y = x, b = NULL, kernel, wrt = "x", u = NULL, precision = "double",
                        backend = NULL) {
  if (!inherits(kernel, "gk_formula")) {
    stop("kernel_grad() differentiates formulas: give `kernel = gk_formula(...)`", call. = FALSE)
  }
  x <- gk_check_points(x, "x", allow_empty = TRUE)
  y <- gk_check_points(y, "y", allow_empty = TRUE)
  gk_check_same_dim(x, y)
  m <- nrow(x)
  n <- nrow(y)
  dim <- ncol(x)
  if (!is.character(wrt) || !length(wrt) || anyNA(wrt) || anyDuplicated(wrt)) {
    stop("`wrt` must name distinct things to differentiate with respect to", call. = FALSE)
  }
  bad <- setdiff(wrt, c("x", "y", "b", names(kernel$params)))
  if (length(bad)) {
    stop("`wrt` = \"", bad[1L], "\" is neither \"x\", \"y\", \"b\" nor a parameter of the formula (",
         paste(names(kernel$params), collapse = ", "), ")", call. = FALSE)
  }
  b <- if (is.null(b)) matrix(1, n, 1L) else gk_grad_matrix(b, n, NA, "b", "nrow(y)")
  u <- if (is.null(u)) matrix(1, m, ncol(b)) else gk_grad_matrix(u, m, ncol(b), "u", "nrow(x)")
  reduce <- function(f, weights, axis = 1L) {
    r <- kernel_reduce(x, y, weights, kernel = f, reduction = "sum", axis = axis,
                       precision = precision, backend = backend)
    matrix(r, ncol = ncol(weights))
  }
  derivative <- function(v) {
    f <- kernel
    f$wrt <- v
    f
  }
  out <- list()
  for (w in wrt) {
    out[[w]] <- switch(w,
      x = vapply(seq_len(dim), function(k) rowSums(reduce(derivative(paste0("x", k)), b) * u),
                 numeric(m)),
      y = vapply(seq_len(dim), function(k) rowSums(reduce(derivative(paste0("y", k)), u, 2L) * b),
                 numeric(n)),
      b = reduce(kernel, u, 2L),
      sum(reduce(derivative(w), b) * u))
    if (w %in% c("x", "y")) out[[w]] <- matrix(out[[w]], ncol = dim)
  }
  out
}

# b or u of kernel_grad() as a double matrix of `rows` rows (and `cols`
# columns unless NA).
gk_grad_matrix <- function(v, rows, cols, arg, what) {
  if (!is.numeric(v) || !(is.null(dim(v)) || is.matrix(v)) || anyNA(v) || any(!is.finite(v))) {
    stop("`", arg, "` must be a finite numeric vector or matrix", call. = FALSE)
  }
  v <- matrix(as.double(v), nrow = if (is.matrix(v)) nrow(v) else length(v))
  if (nrow(v) != rows) {
    stop("`", arg, "` has ", nrow(v), " rows but ", what, " is ", rows, call. = FALSE)
  }
  if (!is.na(cols) && ncol(v) != cols) {
    stop("`", arg, "` has ", ncol(v), " columns but `b` has ", cols, call. = FALSE)
  }
  if (ncol(v) == 0L) stop("`", arg, "` has no columns", call. = FALSE)
  v
}
