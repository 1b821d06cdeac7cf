# What the run-time compilation of the reduction kernels costs a user: the
# first call of each kernel specialization in a session with an empty disk
# cache (compiled by NVRTC), the first call in a new session with the cache
# filled (read from disk), and a warm call, plus gk_warmup() from empty.
#
#   Rscript inst/bench/jit.R            (needs a GPU; uses a fresh temporary cache)
#
# Each session is a separate Rscript process, so that nothing of the first is
# loaded in the second. Times are wall clock around a call whose result is
# back on the host (so the GPU work is finished), medians of 5 for warm calls.
args <- commandArgs(trailingOnly = TRUE)
if (length(args) && args[1] == "--session") {
  library(gpukernels)
  stopifnot(gk_has_gpu())
  out <- args[2]
  set.seed(1)
  m <- 20000L
  x3 <- matrix(runif(3 * m), m, 3); x2 <- x3[, 1:2]; b <- rnorm(m); B <- matrix(rnorm(4 * m), m, 4)
  g <- gk_kernel("gaussian", range = 0.1)
  cases <- list(
    "gaussian sum f64 3D" = function() kernel_matvec(x3, b = b, kernel = g),
    "gaussian sum f32 3D" = function() kernel_matvec(x3, b = b, kernel = g, precision = "single"),
    "exponential sum f64 2D, 4 columns" = function() kernel_matvec(x2, b = B, kernel = "exponential"),
    "matern 3/2 sum f32 2D" = function() kernel_matvec(x2, b = b, kernel = gk_kernel("matern", 0.1, 1.5), precision = "single"),
    "matern nu = 0.8 sum f64 3D" = function() kernel_matvec(x3[1:2000, ], b = b[1:2000], kernel = gk_kernel("matern", 0.1, 0.8)),
    "knn k = 10 f32 3D" = function() knn(x3, k = 10, precision = "single"),
    "knn k = 40 f64 2D" = function() knn(x2, k = 40),
    "logsumexp f32 3D" = function() kernel_reduce(x3, reduction = "logsumexp", kernel = g, precision = "single"),
    "block-sparse symmetric sum f64 3D" = function() {
      ord <- order(x3[, 1]); xs <- x3[ord, ]
      cl <- cbind(seq(1L, m, 500L), pmin(seq(1L, m, 500L) + 499L, m))
      keep <- abs(outer(seq_len(nrow(cl)), seq_len(nrow(cl)), "-")) <= 2
      r <- ranges_from_mask(cl, cl, keep)
      kernel_reduce(xs, b = b, kernel = "exponential", ranges = r, symmetric = TRUE)
    })
  rows <- lapply(names(cases), function(case) {
    first <- system.time(cases[[case]]())[["elapsed"]]
    warm <- median(vapply(1:5, function(i) system.time(cases[[case]]())[["elapsed"]], 0))
    data.frame(case = case, first = first, warm = warm)
  })
  res <- do.call(rbind, rows)
  info <- gk_cache_info()
  res$compiled <- info$compiled
  saveRDS(res, out)
  quit(save = "no")
}

rscript <- file.path(R.home("bin"), "Rscript")
script <- normalizePath(sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE)))
cache <- tempfile("gk-jit-bench-")
Sys.setenv(GK_CACHE_DIR = cache)
session <- function() {
  out <- tempfile(fileext = ".rds")
  status <- system2(rscript, c(shQuote(script), "--session", shQuote(out)))
  if (status != 0 || !file.exists(out)) stop("the benchmark session failed")
  readRDS(out)
}
empty <- session()
filled <- session()
library(gpukernels)
cat(sprintf("GPU: %s; NVRTC compiles with %d CPU threads available\n",
            gk_info()$devices$name[1], parallel::detectCores()))
tab <- data.frame(case = empty$case,
                  "first call, empty cache (s)" = round(empty$first, 3),
                  "first call, new session, cache filled (s)" = round(filled$first, 3),
                  "warm call (s)" = round(empty$warm, 4), check.names = FALSE)
print(tab, row.names = FALSE)
cat(sprintf("programs compiled: %d in the first session, %d in the second\n",
            as.integer(empty$compiled[1]), as.integer(filled$compiled[1])))
# gk_warmup() from an empty cache, all cores.
Sys.setenv(GK_CACHE_DIR = tempfile("gk-jit-warmup-"))
gpukernels:::gk_jit_setup(gpukernels:::gk_cache_dir())
w <- system.time(n <- gk_warmup())[["elapsed"]]
info <- gk_cache_info()
cat(sprintf("gk_warmup(): %d cases, %d programs compiled in %.1f s wall (%.1f s of compiler time), %.1f MB on disk\n",
            n, as.integer(info$compiled), w, info$compile_seconds, info$bytes / 1e6))
