# Ctrl-C during long calls: the call stops within about a second of the
# signal, R's interrupt condition reaches tryCatch(interrupt = ) (and try()
# does not swallow it), and the engines work afterwards.

interrupt_cases <- c(
  # A few rows of x against millions of y: checks inside each row's j loop.
  reduce = "kernel_matvec(x_few, y_many, b_many, k_slow, backend = BACKEND)",
  kmin = "knn(x_few, y_many, k = 3, backend = BACKEND)",
  kernel_matrix = "kernel_matrix(x_square, kernel = k_slow, backend = BACKEND)",
  h2 = "h2_matrix(locs, k_slow, backend = BACKEND)",
  # The export of an on-the-fly matrix evaluates its blocks as a stored build does.
  h2_compress_on_the_fly = "h2_compress(otf, 1e-4)",
  # try() catches errors only: the interrupt must pass through it.
  through_try = "try(kernel_matvec(x_few, y_many, b_many, k_slow, backend = BACKEND), silent = TRUE)"
)
interrupt_setup <- "
  options(gpukernels.threads = 2)
  set.seed(7)
  x_few <- matrix(runif(512), 512, 1)   # long enough to still run when a slow sender fires
  y_many <- matrix(runif(4e6), 4e6, 1)
  b_many <- rnorm(4e6)
  k_slow <- gk_kernel('matern', range = 0.1, smoothness = 0.7)
  x_square <- matrix(runif(2 * 8000), 8000, 2)
  locs <- matrix(runif(2 * 5e4), ncol = 2)
  otf <- h2_matrix(locs, k_slow, backend = 'cpu', storage = 'on_the_fly')   # bases alone: fast
  small_x <- matrix(runif(2 * 37), 37, 2)
  small_b <- rnorm(37)
"
# After the interrupts: a fresh call gives brute-force R's answer.
interrupt_after <- "
  k <- gk_kernel('gaussian', range = 0.3)
  got <- kernel_matvec(small_x, small_x, small_b, k, backend = BACKEND)
  d2 <- as.matrix(dist(small_x))^2
  ref <- drop(exp(-d2 / (2 * 0.09)) %*% small_b)
  max(abs(got - ref)) / max(abs(ref))
"

# The GPU runs these sizes in milliseconds: its cases need many rows of x (the
# reductions run in slices with a check between them). kernel_matrix and H2
# construction on the GPU cannot be made long at a size the host can hold.
interrupt_cases_gpu <- interrupt_cases[c("reduce", "kmin", "through_try")]
interrupt_setup_gpu <- paste(interrupt_setup, "
  x_few <- matrix(runif(1e6), 1e6, 1)
")

check_interrupts <- function(backend, cases = interrupt_cases, setup = interrupt_setup) {
  sub_backend <- function(code) gsub("BACKEND", deparse(backend), code, fixed = TRUE)
  run <- run_interrupted(vapply(cases, sub_backend, ""), setup = setup,
                         after = sub_backend(interrupt_after))
  for (name in names(cases)) {
    res <- run$results[[name]]
    expect_identical(res$outcome, "interrupt", info = name)
    # Generous for a loaded machine; without checks these calls run for minutes.
    expect_lt(res$latency, 5, label = paste(name, "seconds from the signal to the end"))
  }
  expect_lt(run$after, 1e-12)
}

test_that("long CPU calls stop on an interrupt, as R's interrupt condition", {
  skip_on_os("windows")
  check_interrupts("cpu")
})

test_that("long GPU calls stop on an interrupt, as R's interrupt condition", {
  skip_on_os("windows")
  skip_if_no_gpu()
  check_interrupts("gpu", interrupt_cases_gpu, interrupt_setup_gpu)
})

test_that("an interrupted call of future workers stops them too", {
  skip_on_os("windows")
  skip_if_not_installed("future")
  skip_if_not(Sys.info()[["sysname"]] == "Linux")
  # Two CPU workers on a PCF distance matrix of a minute; the interrupt comes
  # while they compute.
  setup <- "
    options(gpukernels.threads = 2)
    future::plan(future::multisession, workers = 2)
    set.seed(8)
    X <- lapply(1:6000, function(i) cbind(c(0, cumsum(rexp(1999))), c(rnorm(1999), 0)))
    invisible(pcf_pdist(X[1:50], backend = 'cpu', workers = 2))   # the workers are up
  "
  cases <- c(pdist_workers = "pcf_pdist(X, backend = 'cpu', workers = 2)")
  # Then the workers take no more blocks: the next call runs at once.
  after <- "
    t0 <- proc.time()[['elapsed']]
    small <- pcf_pdist(X[1:40], backend = 'cpu', workers = 2)
    c(seconds = proc.time()[['elapsed']] - t0,
      error = max(abs(as.vector(small) - as.vector(pcf_pdist(X[1:40], backend = 'cpu', workers = 1)))))
  "
  run <- run_interrupted(cases, setup = setup, after = after, delay = 3)
  expect_identical(run$results$pdist_workers$outcome, "interrupt")
  expect_lt(run$results$pdist_workers$latency, 5)
  expect_lt(run$after[["seconds"]], 5)
  expect_identical(run$after[["error"]], 0)
})
