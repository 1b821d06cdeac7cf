/*
 * CUDA-side helpers of the device layer, for .cu files only: turning CUDA,
 * cuBLAS and cuSOLVER return codes into gk_status, and the per-device library
 * handles (created once, reused by every call, released at unload).
 */
#ifndef GK_CUDA_H
#define GK_CUDA_H

#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cusolverDn.h>
#include "device/gk_device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Converts a CUDA error into a status naming `what` failed; out-of-memory
 * becomes GK_ERR_NOMEM. Returns GK_OK for cudaSuccess. */
gk_status gk_cuda_status(cudaError_t code, const char *what, gk_error *err);
gk_status gk_cublas_status(cublasStatus_t code, const char *what, gk_error *err);
gk_status gk_cusolver_status(cusolverStatus_t code, const char *what, gk_error *err);

/* Checks for a failed kernel launch (call right after <<<...>>>). */
gk_status gk_cuda_check_launch(const char *what, gk_error *err);

/* cuBLAS handles of the device in use, one per lane, created once and kept
 * until gk_device_release_all(). An engine that runs work on several streams
 * at once takes one lane per stream (a handle's workspace must not be shared
 * by two streams running at once); the handle is bound to `stream` on return
 * (a host-side setting, no synchronization). */
enum { GK_BLAS_LANE_0 = 0, GK_BLAS_LANE_1 = 1, GK_BLAS_LANES = 2 };
gk_status gk_cublas_handle(int lane, gk_stream stream, cublasHandle_t *handle, gk_error *err);
gk_status gk_cusolver_handle(cusolverDnHandle_t *handle, gk_error *err);

/* Blocks of `kernel` (a __global__ function) with `block` threads and `smem`
 * bytes of dynamic shared memory that fit on one multiprocessor of the device
 * in use; asked once per (device, kernel, block, smem) and cached. At least 1. */
int gk_device_occupancy(const void *kernel, int block, size_t smem);

/* The compute capability of the device in use as 10 major + minor (90 for
 * an H100), asked once per device; 0 when it cannot be asked. */
int gk_device_arch(void);

#ifdef __cplusplus
}
#endif

/* Evaluate a CUDA call; on failure record it and jump to the local `fail:`
 * label, where the function frees what it holds. */
#define GK_CUDA_TRY(call, what, err)                                        \
  do {                                                                      \
    if (gk_cuda_status((call), (what), (err)) != GK_OK) goto fail;          \
  } while (0)

#define GK_TRY(expr)                                                        \
  do {                                                                      \
    if ((expr) != GK_OK) goto fail;                                         \
  } while (0)

#endif
