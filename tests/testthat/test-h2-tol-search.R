# h2_matrix(tol = )'s search (R/h2_tol_search.R) on tables instead of matrices.

# The uncompressed on-the-fly search over a table of errors and predicted
# times (err[o, e], ms[o, e]: orders by row, etas by column) instead of
# matrices: what it chooses and which orders it builds.
fake_fly_search <- function(err, ms, etas, tol) {
  ns <- asNamespace("gpukernels")
  built <- character()
  real <- get("h2_tol_build", envir = ns)
  unlockBinding("h2_tol_build", ns)
  assign("h2_tol_build", function(s, o, form, previous, e = s$eta) {
    built <<- c(built, sprintf("%d@%g", o, e))
    list(A = list(o = o, e = e), order = o, eta = e, form = form, error = NULL,
         ms = ms[as.character(o), as.character(e)])
  }, envir = ns)
  on.exit({
    assign("h2_tol_build", real, envir = ns)
    lockBinding("h2_tol_build", ns)
  })
  s <- new.env()
  s$orders <- as.integer(rownames(err))
  s$eta <- etas[1]
  s$etas <- etas
  s$tol <- tol
  s$fly_at_eta <- new.env()
  s$measure <- function(A) list(probe = err[as.character(A$o), as.character(A$e)])
  res <- gpukernels:::h2_tol_uncompressed_fly(s, s$orders[1], NULL)
  list(found = res$found, built = built)
}

test_that("the uncompressed search at later etas starts below the order found", {
  etas <- c(3, 2, 1.5)
  orders <- 3:10
  tab <- function(f) {
    m <- outer(orders, etas, f)
    dimnames(m) <- list(orders, etas)
    m
  }
  # the lowest order meeting 0.8 tol at each eta, the fastest of those
  reference <- function(err, ms, tol) {
    best <- NULL
    for (e in as.character(etas)) {
      o <- which(err[, e] <= 0.8 * tol)[1]
      if (!is.na(o) && (is.null(best) || ms[o, e] < best$ms)) {
        best <- list(order = orders[o], eta = as.numeric(e), ms = ms[o, e])
      }
    }
    best
  }
  # the figures of h2_matrix(tol = 1e-4) at 2^20 in 3D, roughly
  err <- tab(function(o, e) c(`3` = 1.8e-2, `2` = 5e-3, `1.5` = 4e-3)[as.character(e)] *
               0.25^(o - 3))
  ms <- tab(function(o, e) c(`3` = 1, `2` = 1.6, `1.5` = 2.2)[as.character(e)] * (o / 3)^6)
  r <- fake_fly_search(err, ms, etas, 1e-4)
  expect_identical(c(r$found$order, r$found$eta), c(6, 2))
  expect_identical(r$built, c("3@3", "4@3", "5@3", "6@3", "7@3", "6@2", "5@2", "5@1.5", "6@1.5"))
  # random tables: errors falling and times growing with the order
  set.seed(52)
  for (i in 1:40) {
    err <- tab(function(o, e) 0 * o)
    ms <- err
    for (e in seq_along(etas)) {
      err[, e] <- 10^(runif(1, -3, -1) - cumsum(runif(length(orders), 0.1, 1.2)))
      ms[, e] <- cumsum(runif(length(orders), 0.1, 3)) * runif(1, 0.5, 2)
    }
    tol <- 10^runif(1, -6, -3)
    r <- fake_fly_search(err, ms, etas, tol)
    ref <- reference(err, ms, tol)
    if (is.null(ref)) {
      expect_null(r$found)
    } else {
      expect_identical(c(r$found$order, r$found$eta), c(ref$order, ref$eta))
    }
    expect_lte(length(r$built), length(orders) * length(etas))
  }
})
