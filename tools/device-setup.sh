# Sourced at the start of a device call (see ../shared/device/README.md), after
# preparing .device/ here (tools/device-pack.sh does these steps):
#   ../shared/device/bundle-r.sh
#   MAKEFLAGS=-j2 GK_CUDA_ARCHS=90 GK_CUDA_PTX=no R CMD INSTALL --preclean -l .device/rlib .
#   xz -c .device/rlib/gpukernels/libs/gpukernels.so > .device/gk-so.xz   # 24 MB -> 15 MB
#   rm .device/rlib/gpukernels/libs/gpukernels.so
#   optional Suggests, each packed as .device/extra-NAME.tar.xz of package folders
#   copied from /usr/lib/R/{site-library,library} (help, html, doc, tests removed):
#     extra-future: future future.apply globals listenv parallelly digest progressr
#                   bigmemory bigmemory.sri uuid Rcpp codetools (2 MB; test-distributed.R)
#     extra-fields: fields and what it loads (spam dotCall64 maps viridis viridisLite
#                   ggplot2 and ggplot2's imports), without maps/mapdata and the data
#                   folders: 12.6 MB with xz -9e, so that R (34 MB), the library (15 MB)
#                   and both fit the 64 MiB carry
# Then, in the device call, with carry [".device"]:
#   . tools/device-setup.sh && GK_TEST_JOBS=8 Rscript tools/run-tests.R
. .device/setup-r.sh
xz -dc .device/gk-so.xz > .device/rlib/gpukernels/libs/gpukernels.so
for t in .device/extra-*.tar.xz; do [ -f "$t" ] && tar -xJf "$t" -C .device/rlib; done
# Debian's OpenBLAS in place of the reference BLAS (tools/device-pack.sh openblas), for
# the comparisons with packages that lean on R's BLAS (fields); the package's own
# tests run with the reference BLAS, as CI does.
if [ "${GK_DEVICE_OPENBLAS:-0}" = 1 ] && [ -f .device/openblas.tar.xz ]; then
  mkdir -p /opt/openblas && tar -xJf .device/openblas.tar.xz -C /opt/openblas
  export LD_LIBRARY_PATH="/opt/openblas:$LD_LIBRARY_PATH" OPENBLAS_NUM_THREADS=16
fi
# No OMP_NUM_THREADS: the engines use every core this process may use, as a
# user's session does (hosts with several GPUs have 16 cores per GPU), and
# tools/run-tests.R gives each test file its share.
nvidia-smi -L
