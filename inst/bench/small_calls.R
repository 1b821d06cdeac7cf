# knn (k = 10) and logsumexp at N = M = 1e5 (float32, float64) and a gaussian
# sum at 1e4 (float32), host data to host result, in one R process: medians of
# 25 calls after 3 warm-up calls, in ms. For comparing builds on one machine:
#   for b in before after; do R_LIBS=/tmp/$b Rscript inst/bench/small_calls.R; done
# (repeat the loop: one build's rounds differ by more than 3% at these sizes).
suppressPackageStartupMessages(library(gpukernels))
set.seed(1)
x <- matrix(runif(3e5), ncol = 3)
y <- matrix(runif(3e5), ncol = 3)
xs <- matrix(runif(3e4), ncol = 3)
b <- rnorm(1e4)
median_ms <- function(f) {
  for (i in 1:3) f()
  median(replicate(25, {
    t0 <- Sys.time()
    f()
    as.numeric(Sys.time() - t0, units = "secs")
  })) * 1000
}
k <- gk_kernel("gaussian", range = 0.5)
r <- c(knn_f32 = median_ms(function() knn(x, y, k = 10, precision = "single")),
       knn_f64 = median_ms(function() knn(x, y, k = 10)),
       lse_f32 = median_ms(function() kernel_reduce(x, y, kernel = k, reduction = "logsumexp",
                                                    precision = "single")),
       gauss_f32_1e4 = median_ms(function() kernel_reduce(xs, xs, b, kernel = k,
                                                          precision = "single")))
cat(sprintf("%s (%s): %s\n", gk_backend(), format(Sys.time(), "%H:%M:%S"),
            paste(names(r), sprintf("%.3f ms", r), collapse = ", ")))
