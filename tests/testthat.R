library(testthat)
library(gpukernels)

test_check("gpukernels")
