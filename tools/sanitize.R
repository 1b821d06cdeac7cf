# Exercised under compute-sanitizer on the GPU machine (tools/device-check.sh):
# small cases of every engine on the GPU, repeated, then the package unloaded so
# that its cached buffers are freed before the leak check runs.
library(gpukernels)
stopifnot(gk_has_gpu())
set.seed(7)
x <- matrix(runif(600), 200, 3)
y <- matrix(runif(999), 333, 3)
b <- matrix(rnorm(333 * 9), 333, 9)
bx <- matrix(rnorm(200 * 9), 200, 9)   # weights over x, for axis = 2
k <- gk_kernel("matern", range = 0.3, smoothness = 1.5)
for (rep in 1:3) {
  for (precision in c("double", "single")) {
    for (method in c("1d", "2d")) {
      kernel_reduce(x, y, b, kernel = k, precision = precision, method = method)
      kernel_reduce(x, y, b[, 1], kernel = "gaussian", precision = precision, method = method)
      kernel_reduce(x, y, bx, kernel = k, axis = 2, precision = precision, method = method)
      for (r in c("min", "max", "argmin", "argmax"))
        kernel_reduce(x, y, kernel = "sqdist", reduction = r, precision = precision, method = method)
      knn(x, y, k = 5, precision = precision, method = method)
      knn(x, y, k = 40, precision = precision, method = method)
      kernel_reduce(x, y, abs(b), kernel = "gaussian", reduction = "logsumexp",
                    precision = precision, method = method)
      kernel_reduce(x, y, b, kernel = "cauchy", reduction = "softmax_sum",
                    precision = precision, method = method)
    }
    dx <- gk_device_matrix(x, precision)
    dy <- gk_device_matrix(y, precision)
    db <- gk_device_matrix(b, precision)
    kernel_matvec(dx, dy, db, k, precision = precision)
    stopifnot(all.equal(as.matrix(dy), y, tolerance = 1e-6))
    rm(dx, dy, db)
    kernel_matrix(x, y, k, backend = "gpu")
    # Block-sparse: short ranges with gaps (tiles gathered across ranges).
    r <- ranges_from_mask(cbind(c(1L, 51L, 121L), c(50L, 120L, 200L)),
                          cbind(c(1L, 70L, 200L), c(60L, 180L, 333L)),
                          matrix(c(TRUE, FALSE, TRUE, TRUE, TRUE, FALSE, FALSE, TRUE, TRUE), 3))
    for (method in c("1d", "2d")) {
      kernel_matvec(x, y, b, k, precision = precision, method = method, ranges = r)
      knn(x, y, k = 5, precision = precision, method = method, ranges = r)
    }
    X <- lapply(1:40, function(i) pcf(c(0, sort(runif(30))), c(rnorm(30), 0)))
    pcf_pdist(X, precision = precision, backend = "gpu")
    pcf_pdist(X, p = Inf, precision = precision, backend = "gpu")
    pcf_kernel(X, X[1:7], precision = precision, backend = "gpu")
    # many blocks, bands evicted and uploaded again (4 kept per GPU)
    Sys.setenv(GK_PCF_BAND_SLOTS = 4)
    old <- options(gpukernels.pcf_budget_bytes = 60^2 * 16)
    X3 <- lapply(1:300, function(i) pcf(c(0, sort(runif(12))), c(rnorm(12), 0)))
    pcf_pdist(X3, precision = precision, backend = "gpu")
    pcf_cdist(X3[1:130], X3, precision = precision, backend = "gpu")
    options(old)
    Sys.unsetenv("GK_PCF_BAND_SLOTS")
    locs <- matrix(runif(3000), 1500, 2)
    A <- h2_matrix(locs, gk_kernel("exponential", range = 0.1), order = 4, leaf_size = 32,
                   precision = precision, backend = "gpu")
    A %*% matrix(rnorm(3000), 1500, 2)
    C <- h2_compress(A, tol = 1e-3)   # GPU QR stacks and Jacobi SVDs
    C %*% matrix(rnorm(3000), 1500, 2)
    O <- h2_matrix(locs, gk_kernel("exponential", range = 0.1), order = 4, leaf_size = 32,
                   precision = precision, backend = "gpu", storage = "on_the_fly")
    O %*% matrix(rnorm(3000), 1500, 2)
    O %*% rnorm(1500)   # one right-hand side: the symmetric (two-way) sums
    # compressed on the GPU without storing its blocks (couplings evaluated in
    # chunks), into dense blocks on the fly with stored couplings; and again
    OC <- h2_compress(O, tol = 1e-4)
    OC %*% matrix(rnorm(3000), 1500, 2)
    h2_compress(OC, tol = 1e-3) %*% rnorm(1500)
    h2_orthogonalize(O) %*% rnorm(1500)
    rm(A, C, O, OC)
  }
}
# The GP engine on the GPU: the Vecchia factor, the solver with an H2 and with a
# tiled operator (gradients: G'b, derivative products), and the H2 rows product.
gl <- matrix(runif(2 * 1203), ncol = 2)
gy <- rnorm(1203)
for (method in c("h2", "tiled")) {
  gp_loglik(gl, gy, kernel = gk_kernel("matern", range = 0.1, smoothness = 1.5), nugget = 0.05,
            method = method, gradient = TRUE, backend = "gpu",
            control = gp_control(probes = 5L, h2_check_rows = 50L))
}
# The exact likelihood on the GPU (cuSOLVER factor, inverse, Fisher
# information, kriging from the factor), a factorization that fails, and the
# neighbour search's grid path on the GPU.
gfit <- gp_fit(gl[1:401, ], gy[1:401], kernel = "matern", smoothness = 1.5, method = "dense",
               backend = "gpu", optim_control = list(maxit = 3))
predict(gfit, matrix(runif(2 * 300), ncol = 2), se.fit = TRUE)
try(gp_loglik(rbind(gl[1:50, ], gl[1:50, ] + 1e-12), rnorm(100), method = "dense", nugget = 0,
              kernel = gk_kernel("gaussian", range = 0.5), backend = "gpu"), silent = TRUE)
local({
  old <- options(gpukernels.gp_dense_knn_pairs = 0)
  on.exit(options(old))
  gpukernels:::gp_neighbors(gl, 10L, "gpu")
})
# knn lists of every length (16, 32, 64 in registers; 65-128 in local memory).
for (precision in c("double", "single")) for (kk in c(1L, 20L, 100L))
  knn(x, y, k = kk, precision = precision, backend = "gpu")
# Formulas: a folded one (the gaussian), one that does not fold, and the dense
# GP's formula matrix kernel; the solver's row-major G products (>= 8 columns).
gf <- gk_formula(exp(-sqdist(x, y) / (2 * l^2)), l = 0.3)
kernel_matvec(x, y, b, gf, backend = "gpu")
kernel_matvec(x, y, b, gk_formula(exp(-abs(x1 - y1) / l) * (1 + x2 * y2), l = 0.5),
              backend = "gpu")
gp_loglik(gl[1:300, ], gy[1:300], kernel = gk_formula(exp(-sqrt(sqdist(x, y)) / r), r = 0.1),
          nugget = 0.05, method = "dense", gradient = TRUE, backend = "gpu")
gp_loglik(gl, gy, kernel = gk_kernel("matern", range = 0.1, smoothness = 1.5), nugget = 0.05,
          method = "h2", backend = "gpu", control = gp_control(probes = 10L, h2_check_rows = 50L))
# Bad input on the GPU path leaves nothing behind either.
try(knn(x, y, k = 400, backend = "gpu"), silent = TRUE)
gc()
detach("package:gpukernels", unload = TRUE)
cat("sanitize.R: done\n")
