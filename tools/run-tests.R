# Runs the installed package's test suite and prints one closing line
# "N passed, N failed, N skipped"; exits non-zero if any test failed.
results <- as.data.frame(testthat::test_dir("tests/testthat", package = "gpukernels",
                                            load_package = "installed",
                                            reporter = testthat::SummaryReporter$new(),
                                            stop_on_failure = FALSE))
failed <- sum(results$failed) + sum(results$error)
skipped <- sum(results$skipped)
passed <- sum(results$nb) - sum(results$failed) - sum(results$skipped)
cat(sprintf("\ntests: %d passed, %d failed, %d skipped\n", passed, failed, skipped))
quit(status = if (failed > 0) 1 else 0)
