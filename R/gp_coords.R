# Locations of the GP functions. coords = "lonlat" (longitude, latitude in
# degrees) become 3D Cartesian coordinates on a sphere of `radius`: their
# Euclidean distance is the chordal distance, so every kernel that is positive
# definite in 3D stays so on the sphere, and every engine (dense, tiled, H2 in
# 3D) runs unchanged. Great-circle distance keeps only some kernels positive
# definite (Matern smoothness <= 1/2, Gneiting 2013): distance =
# "great_circle" turns the exponential into the exponential_great_circle
# kernel, a function of the same 3D points' chordal distance.

gp_coord_types <- c("euclidean", "lonlat")
gp_distances <- c("chordal", "great_circle")

# list(type, radius, distance) checked; what a fit keeps to convert new
# locations.
gp_check_coords <- function(coords, radius, distance = "chordal") {
  type <- gk_match_choice(coords, gp_coord_types, "coords")
  gk_check_scalar(radius, "radius", lower = 0, lower_open = TRUE)
  distance <- gk_match_choice(distance, gp_distances, "distance")
  if (distance == "great_circle" && type != "lonlat") {
    stop("distance = \"great_circle\" needs coords = \"lonlat\" (longitude, latitude in ",
         "degrees)", call. = FALSE)
  }
  list(type = type, radius = as.double(radius), distance = distance)
}

gp_gneiting_note <- paste0(
  "great-circle distance keeps the Matern kernel positive definite on the sphere only ",
  "for smoothness <= 1/2 (Gneiting 2013, Bernoulli 19(4)), so distance = ",
  "\"great_circle\" takes the exponential kernel (matern with smoothness 0.5) alone; ",
  "use the default distance = \"chordal\" for other kernels and smoothness values")

# The kernel the engines evaluate for `coords`: with great-circle distance,
# the exponential_great_circle kernel of the exponential (or Matern 1/2)
# given, on the sphere of coords$radius; else the kernel itself.
# `smoothness`: the smoothness is estimated or differentiated (never valid
# with great-circle distance).
gp_coords_kernel <- function(kernel, coords, smoothness = FALSE) {
  great_circle <- identical(coords$distance, "great_circle")
  if (!great_circle) {
    if (kernel$name %in% gk_sphere_families) {
      stop("the ", kernel$name, " kernel needs coords = \"lonlat\" and distance = ",
           "\"great_circle\"", call. = FALSE)
    }
    return(kernel)
  }
  if (smoothness) {
    stop("the smoothness cannot be estimated with distance = \"great_circle\": ",
         gp_gneiting_note, call. = FALSE)
  }
  exponential <- kernel$name %in% c("exponential", gk_sphere_families) ||
    (kernel$name == "matern" && kernel$smoothness == 0.5)
  if (!exponential) {
    what <- if (kernel$name == "matern") sprintf("matern with smoothness %g", kernel$smoothness)
            else kernel$name
    stop("distance = \"great_circle\" with the ", what, " kernel: ", gp_gneiting_note,
         call. = FALSE)
  }
  gk_kernel("exponential_great_circle", range = kernel$range, variance = kernel$variance,
            radius = coords$radius)
}

# `kernel` with its sphere's radius divided by `scale` (gp_fit() divides the
# locations by their scale), or unchanged.
gp_scale_kernel_radius <- function(kernel, scale) {
  if (!is.null(kernel$radius)) kernel$radius <- kernel$radius / scale
  kernel
}

# The locations the kernel sees: checked points, converted from lon/lat;
# for an anisotropic fit's new locations (coords$angles), rotated.
gp_locations <- function(locs, coords, arg = "locs") {
  locs <- gk_check_points(locs, arg)
  if (!is.null(coords$angles)) {
    # other columns than the fit's: left for the caller's check to name
    if (ncol(locs) != if (length(coords$angles) == 1L) 2L else 3L) return(locs)
    return(gp_rotate_points(locs, coords$angles))
  }
  if (coords$type == "euclidean") return(locs)
  if (ncol(locs) != 2L) {
    stop("`", arg, "` must have 2 columns (longitude, latitude in degrees) with ",
         "coords = \"lonlat\", not ", ncol(locs), call. = FALSE)
  }
  if (any(abs(locs[, 2]) > 90)) {
    stop("`", arg, "` has latitudes outside [-90, 90] (column 2, degrees)", call. = FALSE)
  }
  if (any(locs[, 1] < -180 | locs[, 1] > 360)) {
    stop("`", arg, "` has longitudes outside [-180, 360] (column 1, degrees)", call. = FALSE)
  }
  lon <- locs[, 1] * (pi / 180)
  lat <- locs[, 2] * (pi / 180)
  coords$radius * cbind(cos(lat) * cos(lon), cos(lat) * sin(lon), sin(lat))
}

# Ranges per coordinate (or rotated axis) mean nothing for the 3D points of
# lon/lat locations.
gp_check_coords_ranges <- function(coords, groups) {
  if (coords$type == "lonlat" && length(gp_angle_names(groups))) {
    stop("ranges = \"anisotropic\" needs coords = \"euclidean\": with coords = \"lonlat\" ",
         "the kernel sees 3D points on the sphere", call. = FALSE)
  }
  if (coords$type == "lonlat" && !is.null(groups) && max(groups) > 1L) {
    stop("ranges per coordinate need coords = \"euclidean\": with coords = \"lonlat\" ",
         "the kernel sees 3D points on the sphere", call. = FALSE)
  }
}

# Geometric anisotropy (ranges = "anisotropic"): the kernel sees the points
# rotated, z = R(angles)' x, each rotated axis then divided by its own range
# (a gk_kernel() with a range per dimension), so every engine runs on the
# rotated points as it runs on any others. The columns of R are the axes of
# range1, range2 (, range3): in 2D the first points at `angle` radians
# counter-clockwise from the first coordinate axis; in 3D
# R = R_z(angle1) R_y(angle2) R_x(angle3) (intrinsic z-y'-x'', yaw, pitch
# and roll).
gp_rotation <- function(angles) {
  turn <- function(a, i, j, d) {
    R <- diag(d)
    R[c(i, j), c(i, j)] <- c(cos(a), sin(a), -sin(a), cos(a))
    R
  }
  if (length(angles) == 1L) return(turn(angles[[1L]], 1L, 2L, 2L))
  turn(angles[[1L]], 1L, 2L, 3L) %*% turn(angles[[2L]], 3L, 1L, 3L) %*% turn(angles[[3L]], 2L, 3L, 3L)
}

# The points as the anisotropic kernel sees them (rows: R' x).
gp_rotate_points <- function(locs, angles) {
  out <- locs %*% gp_rotation(angles)
  dimnames(out) <- NULL
  out
}

# The number of angles of `dim` dimensions: 1 in 2D, 3 in 3D.
gp_angle_count <- function(dim) if (dim == 2L) 1L else 3L

# Angles checked: `count` finite numbers (radians).
gp_check_angles <- function(angle, count, arg = "angle") {
  if (!is.numeric(angle) || length(angle) != count || anyNA(angle) || any(!is.finite(angle))) {
    stop("`", arg, "` must be ", if (count == 1L) "a finite number" else
      paste(count, "finite numbers (angle1, angle2, angle3)"), " (radians)", call. = FALSE)
  }
  as.double(angle)
}

# The same rotation's angles in their reported ranges, and the sign of each
# angle's change (the derivatives, and so the rows of vcov, change sign with
# it). Flipping two axes of R (R D, D = diag(+-1), det D = 1) leaves R D^2 R'
# and so the covariance unchanged. 2D: angle + pi, reported in
# (-pi/2, pi/2]. 3D: (a1, a2, a3) ~ (a1, a2, a3 + pi) ~ (a1 + pi, -a2, -a3),
# and (a1, a2 -+ pi, -a3) (the other Euler solution): all three reported in
# (-pi/2, pi/2] (angle2 in [-pi/2, pi/2]).
gp_canonical_angles <- function(angles) {
  half <- function(a) a - pi * ceiling(a / pi - 0.5)          # into (-pi/2, pi/2]
  if (length(angles) == 1L) return(list(angles = half(angles), sign = 1))
  a <- angles - 2 * pi * ceiling(angles / (2 * pi) - 0.5)     # into (-pi, pi]
  sign <- c(1, 1, 1)
  if (abs(a[[2L]]) > pi / 2) {
    a[[2L]] <- a[[2L]] - pi * sign(a[[2L]])
    a[[3L]] <- -a[[3L]]
    sign[[3L]] <- -sign[[3L]]
  }
  if (half(a[[1L]]) != a[[1L]]) {
    a[[1L]] <- half(a[[1L]])
    a[2:3] <- -a[2:3]
    sign[2:3] <- -sign[2:3]
  }
  a[[3L]] <- half(a[[3L]])
  list(angles = a, sign = sign)
}

# A 2D anisotropic fit's axes in the order of their ranges: the permutation of
# the optimizer's parameters `par` that swaps range1 and range2 (positions
# `at_range`) when range1 is the smaller, NULL when it is not or when the two
# are not interchangeable (one fixed, or different bounds). The angle then
# turns by pi/2.
gp_axes_by_range <- function(par, at_range, free, llo, lhi) {
  if (length(at_range) != 2L || anyNA(at_range) || !all(free[at_range]) ||
      llo[[at_range[1L]]] != llo[[at_range[2L]]] || lhi[[at_range[1L]]] != lhi[[at_range[2L]]] ||
      par[[at_range[1L]]] >= par[[at_range[2L]]]) {
    return(NULL)
  }
  perm <- seq_along(par)
  perm[at_range] <- rev(at_range)
  perm
}

# Whether the neighbour search's metric at parameters th1 differs from that at
# th0 (named values of `model`'s parameters; angles at positions at_angle)
# by more than gp_neighbor_stretch along some direction, after a common
# scale (which leaves every neighbour set as it is). Only ranges per group
# and angles move neighbours; one isotropic range never does.
gp_neighbors_moved <- function(model, th0, th1, at_angle) {
  if (is.null(model$range_groups) && !length(at_angle)) return(FALSE)
  metric <- function(th) {
    range <- model$neighbor_range(th)
    R <- if (length(at_angle)) gp_rotation(unname(th[at_angle])) else diag(length(range))
    crossprod(diag(1 / range, length(range)) %*% t(R))
  }
  stretch <- Re(eigen(solve(metric(th0), metric(th1)), only.values = TRUE)$values)
  sqrt(max(stretch) / min(stretch)) > gp_neighbor_stretch
}

# 10% longer along one direction than another: neighbour sets begin to change.
gp_neighbor_stretch <- 1.1
