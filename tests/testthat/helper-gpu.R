# GPU tests run only where a GPU is usable; on CI (CUDA toolkit, no GPU) they skip.
skip_if_no_gpu <- function() {
  skip_if_not(gpukernels::gk_has_gpu(), "no GPU available")
}

# The backends to test: always the CPU, and the GPU when there is one. With
# GK_TEST_GPU_ONLY=1 on a GPU machine, only the GPU: the CPU variants are the
# same code that the CPU-only run of the suite (.ci/run) tests, and device
# time is scarce.
test_backends <- function() {
  if (!gpukernels::gk_has_gpu()) return("cpu")
  if (identical(Sys.getenv("GK_TEST_GPU_ONLY"), "1")) "gpu" else c("cpu", "gpu")
}

# Relative error in the max norm, for comparisons against references.
rel_err <- function(a, b) {
  scale <- max(abs(b), .Machine$double.xmin)
  max(abs(a - b)) / scale
}

# Free memory of the current GPU after a full collection (memory-growth tests).
gpu_free_after_gc <- function() {
  invisible(gc())
  gpukernels::gk_info()$devices$free_memory[gpukernels::gk_info()$current_device]
}

# expr evaluated with the tunables (environment variables, see ?gk_info) set
# as in `values` (a named list; NA unsets one), each restored afterwards.
with_tunables <- function(values, expr) {
  vars <- names(values)
  old <- Sys.getenv(vars, unset = NA, names = TRUE)
  on.exit(for (v in vars) {
    if (is.na(old[[v]])) Sys.unsetenv(v) else do.call(Sys.setenv, as.list(old[v]))
  })
  for (v in vars) {
    if (is.na(values[[v]])) Sys.unsetenv(v)
    else do.call(Sys.setenv, stats::setNames(list(as.character(values[[v]])), v))
  }
  force(expr)
}
