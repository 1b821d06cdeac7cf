gk_kernel_aliases <- c(imq = "inverse_multiquadric", sqdist = "squared_distance",
                       squared_euclidean = "squared_distance", rbf = "gaussian")

#' Kernel specifications
#'
#' One kernel vocabulary for every engine of the package. Kernels are written
#' in terms of the scaled distance \eqn{d = \|(x - y) / \ell\|}, where the range
#' \eqn{\ell} is one number or one per dimension, and the variance \eqn{\sigma^2}:
#' \describe{
#'   \item{`"gaussian"`}{\eqn{\sigma^2 \exp(-d^2/2)}}
#'   \item{`"exponential"`}{\eqn{\sigma^2 \exp(-d)}}
#'   \item{`"matern"`}{\eqn{\sigma^2 \frac{2^{1-\nu}}{\Gamma(\nu)} d^\nu K_\nu(d)}, the
#'     parameterisation of `fields::Matern` and GpGp, with smoothness \eqn{\nu}.
#'     Closed forms are used for \eqn{\nu = 1/2}: \eqn{\sigma^2 e^{-d}};
#'     \eqn{\nu = 3/2}: \eqn{\sigma^2 (1 + d) e^{-d}};
#'     \eqn{\nu = 5/2}: \eqn{\sigma^2 (1 + d + d^2/3) e^{-d}}. Any other
#'     \eqn{\nu > 0} uses the modified Bessel function \eqn{K_\nu}, evaluated
#'     to about 1e-14 relative accuracy at the same cost for every \eqn{\nu}
#'     (large \eqn{\nu} approach the gaussian \eqn{\exp(-d^2 / (4\nu))}).}
#'   \item{`"cauchy"`}{\eqn{\sigma^2 / (1 + d^2)}}
#'   \item{`"inverse_multiquadric"`}{\eqn{\sigma^2 / \sqrt{1 + d^2}} (alias `"imq"`)}
#'   \item{`"linear"`}{\eqn{\sigma^2 \langle x/\ell, y/\ell \rangle}; with the
#'     defaults, the plain inner product \eqn{x \cdot y}}
#'   \item{`"squared_distance"`}{\eqn{\sigma^2 d^2}; with the defaults, the plain
#'     squared Euclidean distance (alias `"sqdist"`)}
#'   \item{`"exponential_great_circle"`}{\eqn{\sigma^2 \exp(-g)} for points on a
#'     sphere of `radius` \eqn{R} (3D coordinates, as [gp_loglik()] makes from
#'     longitude and latitude), \eqn{g = 2\rho \arcsin(\min(1, d / (2\rho)))},
#'     \eqn{\rho = R / \ell}: \eqn{d} is their chordal distance and \eqn{g} their
#'     great-circle distance, both in units of the (single) range. The exponential
#'     is the only kernel of this package that great-circle distance keeps
#'     positive definite (Matérn smoothness at most 1/2, Gneiting 2013); see
#'     `distance` in [gp_loglik()].}
#' }
#' Wherever a function of the package takes `kernel`, a plain string such as
#' `"gaussian"` stands for `gk_kernel("gaussian")` with the defaults.
#'
#' @param name Kernel family (see Details).
#' @param range The length scale \eqn{\ell}: one positive number, or one per
#'   dimension of the points (at least `.Machine$double.xmin`). Engines subtract
#'   a common centre from the points before dividing them by the range, so
#'   coordinates far from the origin keep their accuracy.
#' @param smoothness The Matérn smoothness \eqn{\nu > 0}; only for `"matern"`,
#'   where it is required.
#' @param variance The variance (scale) \eqn{\sigma^2 > 0}.
#' @param radius The sphere's radius, in the unit of the points and the range;
#'   only for `"exponential_great_circle"`, where it is required.
#' @return An object of class `gk_kernel`.
#' @examples
#' gk_kernel("matern", range = 0.2, smoothness = 1.5)
#' gk_kernel("gaussian", range = c(1, 2, 0.5), variance = 2)
#' gk_kernel("exponential_great_circle", range = 1000, radius = 6371)
#' @export
gk_kernel <- function(name, range = 1, smoothness = NULL, variance = 1, radius = NULL) {
  if (!is.character(name) || length(name) != 1L || is.na(name)) {
    stop("kernel `name` must be a single string", call. = FALSE)
  }
  family <- tolower(gsub("[ -]", "_", name))
  if (family %in% names(gk_kernel_aliases)) family <- gk_kernel_aliases[[family]]
  if (!family %in% names(gk_kernel_families)) {
    stop("unknown kernel \"", name, "\"; use one of ",
         paste0("\"", names(gk_kernel_families), "\"", collapse = ", "), call. = FALSE)
  }
  if (!is.numeric(range) || length(range) == 0L || anyNA(range) ||
      any(!is.finite(range)) || any(range <= 0)) {
    stop("kernel `range` must be positive and finite (one value, or one per dimension)",
         call. = FALSE)
  }
  # Below the smallest normal double, 1 / range overflows and scaled distances
  # lose their digits.
  if (any(range < .Machine$double.xmin)) {
    stop("kernel `range` must be at least ", signif(.Machine$double.xmin, 3),
         " (the smallest normal double); divide the coordinates by a common factor instead",
         call. = FALSE)
  }
  gk_check_scalar(variance, "variance", lower = 0, lower_open = TRUE)
  if (family == "matern") {
    if (is.null(smoothness)) {
      stop("the matern kernel needs `smoothness` (e.g. 0.5, 1.5 or 2.5)", call. = FALSE)
    }
    gk_check_scalar(smoothness, "smoothness", lower = 0, lower_open = TRUE)
  } else if (!is.null(smoothness)) {
    stop("`smoothness` applies to the matern kernel only", call. = FALSE)
  }
  sphere <- family %in% gk_sphere_families
  if (sphere) {
    if (is.null(radius)) {
      stop("the ", family, " kernel needs `radius` (the sphere's, in the unit of the range)",
           call. = FALSE)
    }
    gk_check_scalar(radius, "radius", lower = 0, lower_open = TRUE)
    if (length(range) != 1L) {
      stop("the ", family, " kernel takes one range (great-circle distance is isotropic)",
           call. = FALSE)
    }
    if (!is.finite(radius / range)) stop("`radius` / `range` must be finite", call. = FALSE)
  } else if (!is.null(radius)) {
    stop("`radius` applies to the exponential_great_circle kernel only", call. = FALSE)
  }
  structure(c(list(name = family, family_code = gk_kernel_families[[family]],
                   range = as.double(range), variance = as.double(variance),
                   smoothness = if (is.null(smoothness)) NA_real_ else as.double(smoothness)),
              if (sphere) list(radius = as.double(radius))),
            class = "gk_kernel")
}

# The families evaluated at great-circle distances, which carry a `radius`.
gk_sphere_families <- "exponential_great_circle"

#' @export
print.gk_kernel <- function(x, ...) {
  params <- c(if (!is.na(x$smoothness)) sprintf("smoothness = %g", x$smoothness),
              sprintf("range = %s", paste(format(x$range), collapse = ", ")),
              sprintf("variance = %g", x$variance),
              if (!is.null(x$radius)) sprintf("radius = %g", x$radius))
  cat("<gk_kernel> ", x$name, " (", paste(params, collapse = ", "), ")\n", sep = "")
  invisible(x)
}


# A gk_kernel from whatever the user passed as `kernel`. A name is parsed once
# a session (gk_kernel() takes longer than a small reduction); names that
# gk_kernel() refuses are never kept.
gk_state$kernels <- list()
as_gk_kernel <- function(kernel, arg = "kernel", allow_formula = FALSE) {
  if (inherits(kernel, "gk_kernel")) return(gk_validate_kernel(kernel, arg))
  if (inherits(kernel, "gk_formula")) {
    if (allow_formula) return(kernel)
    stop("formulas (gk_formula()) are taken by kernel_reduce(), kernel_matvec(), ",
         "kernel_matrix(), kernel_grad(), gp_loglik() and gp_fit(); here `", arg, "` must be a gk_kernel() or a kernel name", call. = FALSE)
  }
  if (is.character(kernel) && length(kernel) == 1L) {
    if (is.na(kernel) || !nzchar(kernel)) return(gk_kernel(kernel))
    spec <- gk_state$kernels[[kernel]]
    if (is.null(spec)) spec <- gk_state$kernels[[kernel]] <- gk_kernel(kernel)
    return(spec)
  }
  stop("`kernel` must be a kernel name such as \"gaussian\" or a gk_kernel() object",
       call. = FALSE)
}

# A gk_kernel object as it enters the engines: one made by gk_kernel() passes
# unchanged; one edited by hand (or saved by another version) must still hold
# what gk_kernel() would have made, or the engines would read a negative range
# as its absolute value, an unknown family as NaN, or a character range as
# garbage. Every entry point reaches the C engines through as_gk_kernel(); the
# C side (gk_kernel_from_r) repeats the type checks for internal callers.
gk_validate_kernel <- function(kernel, arg = "kernel") {
  if (.Call(gk_r_kernel_ok, kernel)) return(kernel)   # as gk_kernel() makes it: one C check
  bad <- function(what) {
    stop("`", arg, "` is not a valid gk_kernel (edited by hand?): ", what,
         "; make it with gk_kernel()", call. = FALSE)
  }
  if (!is.list(kernel)) bad(paste("it is", gk_describe(unclass(kernel)), "instead of a list"))
  code <- kernel$family_code
  # or the range derivative of a family (gp_dlogrange_kernel())
  if (!is.numeric(code) || length(code) != 1L || is.na(code) ||
      !code %in% c(gk_kernel_families, gk_kernel_dlogrange_families)) {
    bad(paste0("its `family_code` must be one of ", paste(gk_kernel_families, collapse = ", ")))
  }
  name <- names(c(gk_kernel_families, gk_kernel_dlogrange_families))[
    match(code, c(gk_kernel_families, gk_kernel_dlogrange_families))]
  if (!identical(kernel$name, name)) {
    bad(paste0("its `name` must be \"", name, "\" for `family_code` ", code))
  }
  range <- kernel$range
  if (!is.numeric(range) || length(range) == 0L || anyNA(range) || any(!is.finite(range)) ||
      any(range < .Machine$double.xmin)) {
    bad("its `range` must be positive and finite numbers (one, or one per dimension)")
  }
  variance <- kernel$variance
  if (!is.numeric(variance) || length(variance) != 1L || is.na(variance) ||
      !is.finite(variance) || variance <= 0) {
    bad("its `variance` must be one positive finite number")
  }
  smoothness <- kernel$smoothness
  if (name == "matern") {
    if (!is.numeric(smoothness) || length(smoothness) != 1L || is.na(smoothness) ||
        !is.finite(smoothness) || smoothness <= 0) {
      bad("its `smoothness` must be one positive finite number")
    }
  } else if (!identical(smoothness, NA_real_)) {
    bad("its `smoothness` must be NA (it applies to the matern kernel only)")
  }
  radius <- kernel$radius
  if (name %in% gk_sphere_families) {
    if (!is.numeric(radius) || length(radius) != 1L || is.na(radius) || !is.finite(radius) ||
        radius <= 0 || length(range) != 1L || !is.finite(radius / range)) {
      bad("its `radius` must be one positive finite number, with one `range`")
    }
    if (!is.double(radius)) kernel$radius <- as.double(radius)
  } else if (!is.null(radius)) {
    bad("it has a `radius`, which only the exponential_great_circle kernel takes")
  }
  if (!is.integer(code)) kernel$family_code <- as.integer(code)
  if (!is.double(range)) kernel$range <- as.double(range)
  if (!is.double(variance)) kernel$variance <- as.double(variance)
  if (!is.double(smoothness)) kernel$smoothness <- as.double(smoothness)
  kernel
}

# Checks the kernel's range against the dimension of the points.
gk_check_kernel_dim <- function(kernel, dim) {
  if (inherits(kernel, "gk_formula")) return(invisible(kernel))   # checked when expanded
  if (length(kernel$range) != 1L && length(kernel$range) != dim) {
    stop("the kernel's range has ", length(kernel$range), " values but the points have ",
         dim, " dimensions: give one range, or one per dimension", call. = FALSE)
  }
  invisible(kernel)
}

#' Dense kernel matrices
#'
#' Computes the full matrix \eqn{K_{ij} = k(x_i, y_j)}. Memory grows as
#' `nrow(x) * nrow(y)`; for large sets use the reductions, which never form it.
#'
#' @param x Numeric matrix, one row per point.
#' @param y Numeric matrix with the same number of columns; defaults to `x`.
#' @param kernel A [gk_kernel()], a kernel name, or a formula from
#'   [gk_formula()] (computed on the CPU, by its compiled C function, whatever
#'   the backend).
#' @param backend `"auto"`, `"gpu"` or `"cpu"`; see [gk_backend()].
#' @return A `nrow(x)` by `nrow(y)` matrix.
#' @examples
#' x <- matrix(runif(20), 10, 2)
#' K <- kernel_matrix(x, kernel = gk_kernel("matern", range = 0.3, smoothness = 1.5))
#' dim(K)
#' @export
kernel_matrix <- function(x, y = x, kernel = "gaussian", backend = NULL) {
  x <- gk_check_points(x, "x")
  y <- gk_check_points(y, "y")
  gk_check_same_dim(x, y)
  kernel <- gk_check_kernel_dim(as_gk_kernel(kernel, allow_formula = TRUE), ncol(x))
  backend <- gk_backend(backend)
  if (as.double(nrow(x)) * nrow(y) > .Machine$integer.max) {
    stop("the kernel matrix would have more than 2^31 entries; use kernel_reduce() instead",
         call. = FALSE)
  }
  if (inherits(kernel, "gk_formula")) {   # its CPU function, F(x_i, y_j) (or a derivative)
    backend <- "cpu"
    kernel <- gk_formula_native(kernel, ncol(x), "cpu", wrt = kernel$wrt)
  }
  out <- .Call(gk_r_kernel_matrix, x, y, kernel, backend, gk_threads())
  dimnames(out) <- list(rownames(x), rownames(y))
  out
}

#' Evaluate a kernel at given distances
#'
#' @param kernel A [gk_kernel()] or a kernel name.
#' @param d Scaled distances \eqn{d \ge 0} (for `"linear"`, inner products).
#' @return The kernel values, as in the formulas of [gk_kernel()].
#' @examples
#' kernel_eval(gk_kernel("matern", smoothness = 0.8), c(0, 0.5, 1, 2))
#' @export
kernel_eval <- function(kernel, d) {
  kernel <- as_gk_kernel(kernel)
  if (!is.numeric(d) || anyNA(d)) stop("`d` must be numeric without NA", call. = FALSE)
  stat <- if (kernel$name == "linear") as.double(d) else {
    if (any(d < 0)) stop("distances `d` must be non-negative", call. = FALSE)
    as.double(d)^2
  }
  .Call(gk_r_kernel_eval, kernel, stat)
}
