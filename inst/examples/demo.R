# gpukernels demo: what this machine can use, then real computations on every
# backend it has (the CPU always, the GPU when there is one).
library(gpukernels)

print(gk_info())
backends <- if (gk_has_gpu()) c("cpu", "gpu") else "cpu"
timed <- function(expr) {
  t <- system.time(value <- expr)[["elapsed"]]
  list(value = value, seconds = t)
}

cat("\n== Dense Matern covariance of 2000 random locations in the unit square ==\n")
set.seed(1)
locs <- matrix(runif(4000), ncol = 2)
kernel <- gk_kernel("matern", range = 0.2, smoothness = 1.5)
print(kernel)
results <- lapply(backends, function(b) timed(kernel_matrix(locs, kernel = kernel, backend = b)))
for (i in seq_along(backends)) {
  cat(sprintf("  %-3s backend: %.3f s\n", backends[i], results[[i]]$seconds))
}
K <- results[[1]]$value
if (length(results) > 1) {
  cat(sprintf("  largest GPU/CPU difference: %.2e\n", max(abs(results[[2]]$value - K))))
}
cat(sprintf("  smallest eigenvalue %.3e: the covariance matrix is positive definite\n",
            min(eigen(K, symmetric = TRUE, only.values = TRUE)$values)))

cat("\n== PCF distances: stable ranks of H0 diagrams of 200 random point clouds ==\n")
set.seed(3)
diagrams <- lapply(1:200, function(i) {
  points <- matrix(rnorm(2 * 50, sd = if (i %% 2) 1 else 0.3), ncol = 2)
  cbind(0, 0, c(hclust(dist(points), method = "single")$height, Inf))   # exact H0 diagram
})
ranks <- lapply(diagrams, pcf_stable_rank, dim = 0)
results <- lapply(backends, function(b) timed(pcf_pdist(ranks, p = 1, backend = b)))
for (i in seq_along(backends)) {
  cat(sprintf("  %-3s backend: %.3f s for %d distances\n", backends[i], results[[i]]$seconds,
              length(results[[i]]$value)))
}
if (length(results) > 1) {
  cat(sprintf("  largest GPU/CPU difference: %.2e\n", max(abs(results[[2]]$value - results[[1]]$value))))
}
groups <- cutree(hclust(results[[1]]$value, method = "average"), 2)
cat("  two clusters found by hclust vs the two spreads used:\n")
print(table(spread = ifelse(seq_along(ranks) %% 2 == 1, "sd 1", "sd 0.3"), cluster = groups))
cat("\n== H2 covariance matrix of 20000 locations in the unit square ==\n")
locs <- matrix(runif(40000), ncol = 2)
kernel <- gk_kernel("exponential", range = 0.1)
x <- rnorm(20000)
products <- list()
for (b in backends) {
  built <- timed(h2_matrix(locs, kernel, backend = b))
  A <- built$value
  product <- timed(A %*% x)
  products[[b]] <- product$value
  # against the exact kernel products, with mean-zero probes (as a GP solve meets it)
  err <- h2_error(A, probes = 4, iterations = 0)
  cat(sprintf("  %-3s backend: build %.3f s, product %.4f s, relative error %.1e (N(0,1) probes)\n",
              b, built$seconds, product$seconds, err$probe))
}
print(A)
if (length(products) > 1) {
  cat(sprintf("  largest GPU/CPU difference: %.2e\n", max(abs(products$gpu - products$cpu))))
}
cat("\n== Kernel reductions: K %*% b, k nearest neighbours, log-sum-exp, without the kernel matrix ==\n")
set.seed(2)
pts <- matrix(runif(3 * 5000), ncol = 3)
b <- rnorm(5000)
gauss <- gk_kernel("gaussian", range = 0.1)
for (backend in backends) {
  t_sum <- timed(kernel_matvec(pts, pts, b, gauss, backend = backend))
  t_knn <- timed(knn(pts, pts, k = 5, backend = backend))
  lse <- kernel_reduce(pts, pts, kernel = gauss, reduction = "logsumexp", backend = backend)
  cat(sprintf("  %-3s backend: K %%*%% b %.3f s, 5 nearest neighbours %.3f s, logsumexp range [%.2f, %.2f]\n",
              backend, t_sum$seconds, t_knn$seconds, min(lse), max(lse)))
}
K <- kernel_matrix(pts[1:500, ], pts, kernel = gauss)
cat(sprintf("  matches the dense kernel matrix: max difference %.2e\n",
            max(abs(K %*% b - kernel_matvec(pts[1:500, ], pts, b, gauss)))))
cat(sprintf("  nearest neighbour of point 1 other than itself: point %d\n",
            knn(pts[1, , drop = FALSE], pts, k = 2)$index[1, 2]))
