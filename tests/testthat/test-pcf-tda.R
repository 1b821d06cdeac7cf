# Brute-force references for the diagram summaries, evaluated at many points.
random_diagram <- function(n) {
  birth <- round(runif(n, 0, 2), 1)
  death <- birth + round(rexp(n), 1)
  death[sample(n, 1)] <- Inf
  cbind(dimension = sample(0:1, n, replace = TRUE), birth = birth, death = death)
}

test_that("Betti curves, stable ranks and accumulated persistence match brute force", {
  set.seed(7)
  s <- seq(0, 8, by = 0.025) + 0.0125   # between the 0.1-grid points
  for (rep in 1:5) {
    D <- random_diagram(25)
    for (dim in 0:1) {
      B <- D[D[, 1] == dim, , drop = FALSE]
      b <- B[, 2]
      d <- B[, 3]
      betti <- vapply(s, function(x) sum(b <= x & x < d), 0)
      expect_equal(pcf_eval(pcf_betti(D, dim), s), betti)
      rank <- vapply(s, function(x) sum(d - b > x), 0)
      expect_equal(pcf_eval(pcf_stable_rank(D, dim), s), rank)
      fin <- is.finite(d)
      apf <- vapply(s, function(x) sum(((d - b)[fin])[((b + d) / 2)[fin] <= x]), 0)
      expect_equal(pcf_eval(pcf_accumulated_persistence(D, dim), s), apf)
      cut <- pcf_betti(D, dim, tmax = 1.5)
      expect_equal(pcf_eval(cut, s), ifelse(s < 1.5, betti, 0))
    }
  }
})

test_that("diagram summaries feed the distances, and bad diagrams error", {
  set.seed(8)
  diagrams <- lapply(1:6, function(i) random_diagram(15))
  betti <- lapply(diagrams, pcf_betti, dim = 0, tmax = 10)
  expect_s3_class(pcf_pdist(betti), "dist")
  expect_equal(pcf_betti(random_diagram(5)[0, ], 0), pcf(0, 0))
  frame <- as.data.frame(diagrams[[1]])
  expect_equal(pcf_stable_rank(frame, 1), pcf_stable_rank(diagrams[[1]], 1))
  expect_error(pcf_betti(cbind(0, NA, 1), 0), "NA")
  expect_error(pcf_betti(cbind(0, -1, 1), 0), ">= 0")
  expect_error(pcf_betti(cbind(0, 2, 1), 0), "dies before")
  expect_error(pcf_betti(cbind(0, 1), 0), "dimension, birth, death")
  expect_error(pcf_betti(cbind(0, 0, 1), 0.5), "`dim`")
  expect_error(pcf_betti(cbind(0, 0, 1), 0, tmax = -1), "`tmax`")
})
