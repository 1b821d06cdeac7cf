# Shared by the benchmark scripts (sourced): median seconds per call of f(),
# after a warm-up call; calls are batched so that a batch takes >= min_batch s.
time_call <- function(f, min_batch = 0.2, batches = 5) {
  f()
  t1 <- system.time(f())[["elapsed"]]
  reps <- max(1L, ceiling(min_batch / max(t1, 1e-5)))
  times <- vapply(seq_len(batches), function(i) {
    system.time(for (r in seq_len(reps)) f())[["elapsed"]] / reps
  }, numeric(1))
  stats::median(times)
}

# Median seconds per call of f() and of g(), their batches alternating, so that
# a drift of the machine (clocks, other load) reaches both: for ratios of two
# calls that take a fraction of a millisecond.
time_pair <- function(f, g, min_batch = 0.2, batches = 15) {
  f()
  g()
  t1 <- max(system.time(f())[["elapsed"]], system.time(g())[["elapsed"]])
  reps <- max(1L, ceiling(min_batch / max(t1, 1e-5)))
  batch <- function(h) system.time(for (r in seq_len(reps)) h())[["elapsed"]] / reps
  times <- vapply(seq_len(batches), function(i) c(batch(f), batch(g)), numeric(2))
  c(stats::median(times[1L, ]), stats::median(times[2L, ]))
}

# Appends a one-row data frame to the list `rows` and prints it at once, so a
# run cut short by a time limit still shows what it measured.
record_row <- function(rows, row) {
  cat("row:", paste(names(row), vapply(row, function(v) format(v, digits = 4), ""), sep = "=",
                    collapse = " "), "\n")
  flush(stdout())
  c(rows, list(row))
}
