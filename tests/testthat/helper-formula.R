# Formulas for the gk_formula() tests, each with an independent R function of
# two points (the brute-force reference) and the dimension it is tested in.
formula_cases <- function() {
  list(
    gaussian = list(f = gk_formula(exp(-sqdist(x, y) / (2 * s^2)), s = 0.4), dim = 3,
                    r = function(a, b) exp(-sum((a - b)^2) / (2 * 0.4^2))),
    space_time = list(
      f = gk_formula(exp(-sqdist(x[1:2], y[1:2]) / (2 * s^2)) *
                       (1 + cos(2 * pi * abs(t_x - t_y) / p)),
                     s = 0.3, p = 0.7, coords = c("u", "v", "t")), dim = 3,
      r = function(a, b) exp(-sum((a[1:2] - b[1:2])^2) / (2 * 0.09)) *
        (1 + cos(2 * pi * abs(a[3] - b[3]) / 0.7))),
    laplace = list(f = gk_formula(exp(-norm(x - y) / l), l = 0.5), dim = 2,
                   r = function(a, b) exp(-sqrt(sum((a - b)^2)) / 0.5)),
    sum_of_two = list(
      f = gk_formula(w * exp(-sqdist(x, y) / l1) + (1 - w) / (1 + sqdist(x, y) / l2),
                     w = 0.3, l1 = 0.2, l2 = 1.5), dim = 4,
      r = function(a, b) { d2 <- sum((a - b)^2); 0.3 * exp(-d2 / 0.2) + 0.7 / (1 + d2 / 1.5) }),
    polynomial = list(f = gk_formula((dot(x, y) + c0)^3, c0 = 0.5), dim = 2,
                      r = function(a, b) (sum(a * b) + 0.5)^3),
    sigmoid = list(f = gk_formula(tanh(k * dot(x, y) - c0), k = 1.3, c0 = 0.2), dim = 5,
                   r = function(a, b) tanh(1.3 * sum(a * b) - 0.2)),
    separable = list(f = gk_formula(exp(-abs(x1 - y1) / l1 - (x[2] - y[2])^2 / l2), l1 = 0.6, l2 = 0.3),
                     dim = 2, r = function(a, b) exp(-abs(a[1] - b[1]) / 0.6 - (a[2] - b[2])^2 / 0.3)),
    rational_quadratic = list(
      f = gk_formula((1 + sqdist(x, y) / (2 * al * l^2))^(-al), al = 1.7, l = 0.4), dim = 1,
      r = function(a, b) (1 + sum((a - b)^2) / (2 * 1.7 * 0.16))^(-1.7)),
    wendland = list(
      f = gk_formula(pmax(1 - norm(x - y) / r, 0)^4 * (4 * norm(x - y) / r + 1), r = 0.8), dim = 3,
      r = function(a, b) { d <- sqrt(sum((a - b)^2)); max(1 - d / 0.8, 0)^4 * (4 * d / 0.8 + 1) }),
    asymmetric = list(
      f = gk_formula(exp(-(x1 - 2 * y1)^2) * (1 + y2^2) + ifelse(x2 > y2, log1p(x[2]^2), sin(y1))),
      dim = 2,
      r = function(a, b) exp(-(a[1] - 2 * b[1])^2) * (1 + b[2]^2) +
        if (a[2] > b[2]) log1p(a[2]^2) else sin(b[1]))
  )
}

# The matrix F(x_i, y_j) of a reference function.
formula_matrix <- function(r, x, y) {
  out <- matrix(0, nrow(x), nrow(y))
  for (i in seq_len(nrow(x))) for (j in seq_len(nrow(y))) out[i, j] <- r(x[i, ], y[j, ])
  out
}
