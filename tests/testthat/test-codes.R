# R's code tables (R/codes.R) are made from the C enums when the package loads.

test_that("the code tables are the C glue's, and the exported functions use them", {
  codes <- .Call(gpukernels:::gk_r_codes)
  expect_identical(gpukernels:::gk_reductions, codes$reductions)
  expect_identical(gpukernels:::gk_reduce_methods, codes$reduce_methods)
  expect_identical(gpukernels:::gk_kernel_families, codes$kernel_families)
  expect_identical(gpukernels:::gk_memory_budget_fraction, codes$memory_budget_fraction)
  expect_identical(gpukernels:::gk_file_pages, codes$file_pages)
  expect_true(codes$memory_budget_fraction > 0 && codes$memory_budget_fraction < 1)
  for (table in codes[names(codes) != "memory_budget_fraction"]) {
    expect_type(table, "integer")
    expect_false(anyDuplicated(table) > 0 || anyDuplicated(names(table)) > 0)
  }
  for (family in names(codes$kernel_families)) {
    k <- gk_kernel(family, smoothness = if (family == "matern") 1.5,
                   radius = if (family %in% gpukernels:::gk_sphere_families) 1)
    expect_identical(k$family_code, codes$kernel_families[[family]])
  }
  expect_error(kernel_reduce(matrix(1, 2, 1), reduction = "median", backend = "cpu"),
               paste(names(codes$reductions), collapse = ".*"))
})

test_that("range-derivative family codes are valid kernels, codes beyond them are not", {
  derivatives <- .Call(gpukernels:::gk_r_codes)$kernel_dlogrange_families
  for (family in names(derivatives)) {
    k <- gk_kernel(family, smoothness = if (family == "matern") 1.5,
                   radius = if (family %in% gpukernels:::gk_sphere_families) 1)
    k$family_code <- derivatives[[family]]
    expect_identical(gpukernels:::gk_validate_kernel(k), k)
  }
  k$family_code <- max(derivatives) + 1L
  expect_error(gpukernels:::gk_validate_kernel(k), "family_code")
})
