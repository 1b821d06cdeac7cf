# On the GPU machine: a long reduction (3e6 x 3e6 pairs, float64, about 17 s)
# receives SIGINT after 2 s from a child process; it should stop within a slice.
library(gpukernels)
stopifnot(gk_has_gpu())
set.seed(3)
x <- matrix(runif(9e6), 3e6, 3)
b <- runif(3e6)
k <- gk_kernel("gaussian", range = 0.1)
parent <- Sys.getpid()
child <- parallel::mcparallel({
  Sys.sleep(2)
  tools::pskill(parent, tools::SIGINT)
})
start <- Sys.time()
outcome <- tryCatch({
  kernel_matvec(x, x, b, k)
  "finished"
}, interrupt = function(e) "interrupt condition",
   error = function(e) paste("error:", conditionMessage(e)))
elapsed <- as.numeric(difftime(Sys.time(), start, units = "secs"))
parallel::mccollect(child)
cat(sprintf("interrupt check: %s after %.2f s\n", outcome, elapsed))
# The engine is usable afterwards.
small <- x[1:500, ]
ref <- kernel_matvec(small, small, b[1:500], k, backend = "cpu")
got <- kernel_matvec(small, small, b[1:500], k)
cat(sprintf("after the interrupt: max relative difference %.2e\n", max(abs(got - ref)) / max(abs(ref))))
