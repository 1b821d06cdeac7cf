# Random PCFs drawn as masspcf's own benchmark draws them: breakpoint count
# uniform on 10..1000, times 0 followed by sorted |N(0,1)|, all scaled by one
# |N(0,1)| per function, values N(0,1), last value 0. Sourced by the PCF benches.
draw_pcfs <- function(n, seed = 1) {
  set.seed(seed)
  lapply(seq_len(n), function(i) {
    k <- sample(10:1000, 1)
    t <- c(0, sort(abs(rnorm(k - 1)))) * abs(rnorm(1))
    cbind(t = t, v = c(rnorm(k - 1), 0))
  })
}
