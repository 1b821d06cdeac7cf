# Ranks per level of an H2 matrix, through the exported summary().
h2_ranks <- function(A) summary(A)$level_ranks
