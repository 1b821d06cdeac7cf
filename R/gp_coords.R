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

# The locations the kernel sees: checked points, converted from lon/lat.
gp_locations <- function(locs, coords, arg = "locs") {
  locs <- gk_check_points(locs, arg)
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

# Ranges per coordinate mean nothing for the 3D points of lon/lat locations.
gp_check_coords_ranges <- function(coords, groups) {
  if (coords$type == "lonlat" && !is.null(groups) && max(groups) > 1L) {
    stop("ranges per coordinate need coords = \"euclidean\": with coords = \"lonlat\" ",
         "the kernel sees 3D points on the sphere", call. = FALSE)
  }
}
