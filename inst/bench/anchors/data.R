# Writes the data of the side-by-side benchmarks (inst/bench/anchors/run.sh)
# as raw little-endian arrays that both R and Python read, so that the anchors
# and gpukernels see identical inputs. Usage: Rscript data.R DIR PARTS
# (PARTS: "keops", "masspcf" or "keops,masspcf"; "knn": KeOps' knn cases only). DIR/manifest.tsv lists every
# file: name, rows, cols, type (f64, i32); matrices are column-major.
args <- commandArgs(trailingOnly = TRUE)
dir <- if (length(args) >= 1) args[1] else "anchors-data"
parts <- strsplit(if (length(args) >= 2) args[2] else "keops,masspcf", ",")[[1]]
dir.create(dir, showWarnings = FALSE, recursive = TRUE)
manifest <- file.path(dir, "manifest.tsv")
if (!file.exists(manifest)) writeLines("name\trows\tcols\ttype", manifest)

put <- function(name, x, type = c("f64", "i32")) {
  type <- match.arg(type)
  x <- as.matrix(x)
  con <- file(file.path(dir, paste0(name, ".", type)), "wb")
  if (type == "f64") writeBin(as.double(x), con, size = 8, endian = "little")
  else writeBin(as.integer(x), con, size = 4, endian = "little")
  close(con)
  cat(sprintf("%s\t%d\t%d\t%s\n", name, nrow(x), ncol(x), type), file = manifest, append = TRUE)
}

if ("knn" %in% parts && !"keops" %in% parts) {
  # The knn cases alone (part "knn"): the same x and y as "keops" writes.
  set.seed(14)
  put("x", matrix(runif(3e6), 1e6, 3))
  put("y", matrix(runif(3e6), 1e6, 3))
}

if ("keops" %in% parts) {
  set.seed(14)
  # Points in the unit cube, weights N(0, 1): the gaussian sums, logsumexp and
  # knn cases take the first rows of these (1e6, 1e5, 1e4).
  put("x", matrix(runif(3e6), 1e6, 3))
  put("y", matrix(runif(3e6), 1e6, 3))
  put("b", rnorm(1e6))
  # The 2D scheme: M = 1e3 against N = 1e7 (y and b resident on the GPU).
  put("y_big", matrix(runif(3e7), 1e7, 3))
  put("b_big", rnorm(1e7))
}

if ("masspcf" %in% parts) {
  # masspcf's benchmark generator (benchmarking/python/mpcfbench.py): counts
  # uniform on 10..999, times 0 then sorted |N(0,1)| scaled by one |N(0,1)| per
  # function, values N(0,1) with the last one 0. R's streams, not numpy's: the
  # same distribution, and identical data on both sides through these files.
  set.seed(15)
  n <- 5e4
  counts <- sample.int(990L, n, replace = TRUE) + 9L
  t <- vector("list", n)
  v <- vector("list", n)
  for (i in seq_len(n)) {
    k <- counts[i]
    tt <- sort(abs(rnorm(k)))
    tt[1] <- 0
    t[[i]] <- tt * abs(rnorm(1))
    vv <- rnorm(k)
    vv[k] <- 0
    v[[i]] <- vv
  }
  put("pcf_counts", counts, "i32")
  put("pcf_t", unlist(t, use.names = FALSE))
  put("pcf_v", unlist(v, use.names = FALSE))
}
cat("data written to", dir, "\n")
