# Locations of the GP functions. coords = "lonlat" (longitude, latitude in
# degrees) become 3D Cartesian coordinates on a sphere of `radius`: their
# Euclidean distance is the chordal distance, so every kernel that is positive
# definite in 3D stays so on the sphere (great-circle distance keeps only some:
# Gneiting 2013), and every engine (dense, tiled, H2 in 3D) runs unchanged.

gp_coord_types <- c("euclidean", "lonlat")

# list(type, radius) checked; what a fit keeps to convert new locations.
gp_check_coords <- function(coords, radius) {
  type <- gk_match_choice(coords, gp_coord_types, "coords")
  gk_check_scalar(radius, "radius", lower = 0, lower_open = TRUE)
  list(type = type, radius = as.double(radius))
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
