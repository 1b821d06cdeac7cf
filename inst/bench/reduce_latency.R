# Where the time of one small reduction call goes (N = M = 1e4, D = 3, gaussian
# sum, float32 and float64): the whole call from R, the same with data already on the GPU,
# the R-side checks alone (CPU backend on one point), the finiteness check, and
# the C side alone.
# Medians of 7 batches of 300 calls after a warm-up.
library(gpukernels)
per_call_us <- function(f, reps = 300, batches = 7) {
  for (i in 1:50) f()
  1e6 * stats::median(vapply(seq_len(batches), function(i)
    system.time(for (r in seq_len(reps)) f())[["elapsed"]] / reps, 0))
}
set.seed(2)
kernel <- gk_kernel("gaussian", range = 0.1)
x <- matrix(runif(3e4), 1e4, 3)
b <- runif(1e4)
one <- x[1, , drop = FALSE]
# The C side alone: the same call through .Call with the arguments already
# checked (what remains is the upload, the kernels, the download).
spec <- gpukernels:::as_gk_kernel(kernel)
direct <- function(x, y, b, single = TRUE) {
  .Call(gpukernels:::gk_r_reduce,
        gpukernels:::gk_reduce_spec(x, y, b, spec, "sum", 1L, 1L,
                                    if (single) "single" else "double", "auto", "gpu", 0L, TRUE),
        gpukernels:::gk_reductions, gpukernels:::gk_reduce_methods)
}
rows <- data.frame(
  part = c("whole call, host data (float32)", "whole call, host data (float64)",
           "whole call, device data (float32)", "R-side work only (CPU backend, 1 point)",
           "finiteness check of x (1e4 x 3)", "C side only, host data (float32)",
           "C side only, host data (float64)",
           "C side only, device data (float32)"),
  microseconds = c(
    per_call_us(function() kernel_matvec(x, x, b, kernel, precision = "single")),
    per_call_us(function() kernel_matvec(x, x, b, kernel)),
    local({
      dx <- gk_device_matrix(x, "single"); db <- gk_device_matrix(b, "single")
      per_call_us(function() kernel_matvec(dx, dx, db, kernel, precision = "single"))
    }),
    per_call_us(function() kernel_matvec(one, one, 1, kernel, precision = "single", backend = "cpu")),
    per_call_us(function() .Call(gpukernels:::gk_r_check_finite, x, "x")),
    per_call_us(function() direct(x, x, b)),
    per_call_us(function() direct(x, x, b, single = FALSE)),
    local({
      px <- gpukernels:::gk_device_matrix_ptr(gk_device_matrix(x, "single"))
      pb <- gpukernels:::gk_device_matrix_ptr(gk_device_matrix(b, "single"))
      per_call_us(function() direct(px, px, pb))
    })))
rows$microseconds <- round(rows$microseconds, 1)
print(rows, row.names = FALSE, right = FALSE)
