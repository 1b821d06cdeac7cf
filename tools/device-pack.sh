#!/bin/sh
# Prepares .device/ for a device call (see ../shared/device/README.md and
# tools/device-setup.sh): the R bundle, this checkout built for sm_90 into
# .device/rlib with its .so packed by xz, and optional extras, each a tarball
# that device-setup.sh unpacks when present. The carry holds 64 MiB: R (34 MB)
# and the library (15 MB) leave room for one of the larger extras per call.
#
#   tools/device-pack.sh build            # R bundle + package
#   tools/device-pack.sh future           # .device/extra-future.tar.xz (test-distributed.R)
#   tools/device-pack.sh fields           # .device/extra-fields.tar.xz (gp.R's comparison)
#   tools/device-pack.sh openblas         # .device/openblas.tar.xz: Debian's OpenBLAS, used by
#                                         # device-setup.sh only with GK_DEVICE_OPENBLAS=1
#   tools/device-pack.sh drop NAME        # removes an extra before a call that does not need it
set -eu
root=$(git rev-parse --show-toplevel)
dev="$root/.device"
pack_packages() {   # name, packages...: their folders without help, docs and tests
  name=$1; shift
  tmp=$(mktemp -d)
  for p in "$@"; do
    src=$(Rscript -e "cat(find.package('$p'))")
    cp -a "$src" "$tmp/"
  done
  find "$tmp" -mindepth 2 -maxdepth 2 -type d \( -name help -o -name html -o -name doc \
    -o -name tests -o -name data -o -name demo -o -name po -o -name extdata \
    -o -name mapdata -o -name cvdemulator \) -exec rm -rf {} +
  tar -C "$tmp" -cf - . | xz -9e > "$dev/extra-$name.tar.xz"
  rm -rf "$tmp"
  ls -la "$dev/extra-$name.tar.xz"
}
case "${1:-build}" in
  build)
    "$root/../shared/device/bundle-r.sh"
    (cd "$root" && MAKEFLAGS=-j2 GK_CUDA_ARCHS=90 GK_CUDA_PTX=no \
      R CMD INSTALL --preclean --no-test-load -l "$dev/rlib" .)
    xz -T2 -c "$dev/rlib/gpukernels/libs/gpukernels.so" > "$dev/gk-so.xz"
    rm "$dev/rlib/gpukernels/libs/gpukernels.so"
    ls -la "$dev/gk-so.xz" ;;
  future)
    pack_packages future future future.apply globals listenv parallelly digest progressr \
      bigmemory bigmemory.sri uuid Rcpp codetools ;;
  fields)
    # fields and what it loads; maps without its map databases (fields draws none here)
    pack_packages fields fields spam dotCall64 maps viridis viridisLite ggplot2 gridExtra \
      cli glue gtable isoband lifecycle mgcv nlme rlang scales tibble vctrs withr farver \
      labeling munsell R6 RColorBrewer fansi magrittr pillar pkgconfig colorspace utf8 ;;
  openblas)
    tmp=$(mktemp -d)
    (cd "$tmp" && apt-get download libopenblas0-pthread >/dev/null 2>&1 && dpkg -x ./*.deb x)
    lib=$(dirname "$(find "$tmp/x" -name 'libblas.so.3' | head -1)")
    tar -C "$lib" -cf - . | xz -9e > "$dev/openblas.tar.xz"
    rm -rf "$tmp"
    ls -la "$dev/openblas.tar.xz" ;;
  drop)
    rm -f "$dev/extra-$2.tar.xz" "$dev/$2.tar.xz" ;;
  *) echo "usage: tools/device-pack.sh build|future|fields|openblas|drop NAME" >&2; exit 2 ;;
esac
du -sh "$dev"
