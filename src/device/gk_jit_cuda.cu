// The run-time compiler (gk_jit.h): NVRTC for the device in use, the
// session's programs in memory, the disk cache below them.
#include <dlfcn.h>
#include <nvrtc.h>
#include <stdlib.h>
#include <string.h>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include "device/gk_jit.h"
#include "device/gk_cuda.h"
#include "device/gk_hooks.h"
#include "gk_config.h"

namespace {

// Compile options: those nvcc uses for the package's own kernels. Unannotated
// functions (the kernels' generic lambdas) are device functions.
const char *const OPTIONS[] = {"-std=c++17", "-default-device"};
constexpr int NOPTIONS = 2;

struct Program {
  std::vector<const void *> kernels;
};

std::mutex lock;                             // the programs below, and the cache directory
std::map<std::string, Program> programs;     // by target and key

double seconds_since(std::chrono::steady_clock::time_point t0)
{
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// What NVRTC makes for a device of compute capability major.minor: machine
// code for it when NVRTC knows the architecture, else PTX of the newest one
// it knows (which the driver compiles for the newer GPU).
struct Target {
  int arch = 0;
  bool ptx = false;
  std::string option;
};

gk_status target_for(int want, Target *t, gk_error *err)
{
  int count = 0;
  if (nvrtcGetNumSupportedArchs(&count) != NVRTC_SUCCESS || count <= 0)
    return gk_fail(err, GK_ERR_CUDA, "NVRTC lists no GPU architectures");
  std::vector<int> archs((size_t) count);
  nvrtcGetSupportedArchs(archs.data());
  t->arch = 0;
  for (int a : archs)
    if (a <= want && a > t->arch) t->arch = a;
  if (t->arch == 0)
    return gk_fail(err, GK_ERR_CUDA, "this CUDA toolkit's NVRTC cannot compile for the GPU "
                   "(compute capability %d.%d)", want / 10, want % 10);
  t->ptx = t->arch != want;
  t->option = (t->ptx ? "--gpu-architecture=compute_" : "--gpu-architecture=sm_") + std::to_string(t->arch);
  return GK_OK;
}

std::string nvrtc_log(nvrtcProgram p)
{
  size_t size = 0;
  if (nvrtcGetProgramLogSize(p, &size) != NVRTC_SUCCESS || size <= 1) return "";
  std::string log(size, '\0');
  nvrtcGetProgramLog(p, &log[0]);
  if (log.size() > 600) log = log.substr(0, 600) + " ...";
  return log;
}

// One NVRTC compile: the image (machine code or PTX) and the lowered names.
struct Compiled {
  gk_status status = GK_OK;
  gk_error err;
  std::vector<char> image;
  std::vector<std::string> lowered;
};

// NVRTC opens its builtins library by name at its first compile, which the
// dynamic linker finds only where the toolkit's lib folder is on its search
// path; loaded first from the folder this build linked NVRTC from, it is
// found wherever the package is used. Failing here is not an error: NVRTC
// then searches as usual.
void preload_builtins()
{
  static std::once_flag once;
  std::call_once(once, []() {
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return;
    const std::string path = std::string(GK_CUDA_LIBDIR) + "/libnvrtc-builtins.so." +
                             std::to_string(major) + "." + std::to_string(minor);
    dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  });
}

void compile(const std::string &source, const std::vector<std::string> &names, const Target &t,
             const char *what, Compiled *out)
{
  gk_error_clear(&out->err);
  preload_builtins();
  nvrtcProgram p;
  nvrtcResult r = nvrtcCreateProgram(&p, source.c_str(), "gpukernels_jit.cu", gk_jit_source_count(),
                                     gk_jit_source_texts(), gk_jit_source_names());
  if (r != NVRTC_SUCCESS) {
    out->status = gk_fail(&out->err, GK_ERR_CUDA, "NVRTC could not start compiling %s: %s", what,
                          nvrtcGetErrorString(r));
    return;
  }
  for (const std::string &n : names) nvrtcAddNameExpression(p, n.c_str());
  std::vector<const char *> opts(OPTIONS, OPTIONS + NOPTIONS);
  opts.push_back(t.option.c_str());
  r = nvrtcCompileProgram(p, (int) opts.size(), opts.data());
  if (r != NVRTC_SUCCESS) {
    out->status = gk_fail(&out->err, r == NVRTC_ERROR_OUT_OF_MEMORY ? GK_ERR_NOMEM : GK_ERR_INTERNAL,
                          "compiling %s for the GPU failed (%s): %s", what, nvrtcGetErrorString(r),
                          nvrtc_log(p).c_str());
    nvrtcDestroyProgram(&p);
    return;
  }
  size_t size = 0;
  r = t.ptx ? nvrtcGetPTXSize(p, &size) : nvrtcGetCUBINSize(p, &size);
  if (r == NVRTC_SUCCESS) {
    out->image.resize(size);
    r = t.ptx ? nvrtcGetPTX(p, out->image.data()) : nvrtcGetCUBIN(p, out->image.data());
  }
  for (size_t i = 0; r == NVRTC_SUCCESS && i < names.size(); i++) {
    const char *low = NULL;
    r = nvrtcGetLoweredName(p, names[i].c_str(), &low);
    if (r == NVRTC_SUCCESS) out->lowered.push_back(low);
  }
  if (r != NVRTC_SUCCESS)
    out->status = gk_fail(&out->err, GK_ERR_INTERNAL, "NVRTC compiled %s but gave no image: %s", what,
                          nvrtcGetErrorString(r));
  nvrtcDestroyProgram(&p);
}

// Compiles on a helper thread while the calling thread waits, so that a
// compile longer than a second is announced by the caller (progress lines
// come from the thread that runs the R call, never from helpers).
void compile_announced(const std::string &source, const std::vector<std::string> &names,
                       const Target &t, const char *what, Compiled *out)
{
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::thread worker([&]() {
    compile(source, names, t, what, out);
    std::lock_guard<std::mutex> g(m);
    done = true;
    cv.notify_one();
  });
  {
    std::unique_lock<std::mutex> g(m);
    if (!cv.wait_for(g, std::chrono::seconds(1), [&]() { return done; })) {
      g.unlock();
      gk_progress("gpukernels: compiling %s for this GPU (sm_%d; first use only, then cached)", what,
                  t.arch);
    }
  }
  worker.join();
}

// Loads an image and finds its kernels; false (and no handles) when the
// driver refuses it.
bool load(const void *image, const std::vector<std::string> &lowered, Program *prog, gk_error *err)
{
  cudaLibrary_t lib;
  cudaError_t e = cudaLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0);
  if (e != cudaSuccess) {
    gk_cuda_status(e, "loading compiled kernels", err);
    cudaGetLastError();
    return false;
  }
  prog->kernels.clear();
  for (const std::string &name : lowered) {
    cudaKernel_t k;
    e = cudaLibraryGetKernel(&k, lib, name.c_str());
    if (e != cudaSuccess) {
      gk_cuda_status(e, "finding a compiled kernel", err);
      cudaGetLastError();
      cudaLibraryUnload(lib);
      return false;
    }
    prog->kernels.push_back((const void *) k);
  }
  return true;
}

}  // namespace

extern "C" gk_status gk_jit_kernels(const char *source, int count, const char *const *names,
                                    const char *what, const void **kernels, gk_error *err)
{
  if (!gk_jit_configured())
    return gk_fail(err, GK_ERR_INTERNAL, "the GPU kernel sources were not found (the package's "
                   "include directory); reinstall gpukernels");
  const int arch = gk_device_arch();
  if (arch <= 0) return gk_fail(err, GK_ERR_CUDA, "could not ask the GPU's architecture");
  std::vector<std::string> name_list(names, names + count);
  Target t;
  if (target_for(arch, &t, err)) return err->status;
  int nvrtc_major = 0, nvrtc_minor = 0;
  nvrtcVersion(&nvrtc_major, &nvrtc_minor);
  uint64_t key = gk_jit_sources_hash();
  const std::string stamp = t.option + " nvrtc " + std::to_string(nvrtc_major) + "." +
                            std::to_string(nvrtc_minor);
  key = gk_jit_hash(key, stamp.c_str(), stamp.size() + 1);
  for (int i = 0; i < NOPTIONS; i++) key = gk_jit_hash(key, OPTIONS[i], strlen(OPTIONS[i]) + 1);
  key = gk_jit_hash(key, source, strlen(source) + 1);
  for (const std::string &n : name_list) key = gk_jit_hash(key, n.c_str(), n.size() + 1);
  const std::string memory_key = std::to_string(t.arch) + ":" + std::to_string(key);
  {
    std::lock_guard<std::mutex> guard(lock);
    auto found = programs.find(memory_key);
    if (found != programs.end()) {
      for (int i = 0; i < count; i++) kernels[i] = found->second.kernels[(size_t) i];
      return GK_OK;
    }
  }
  // Not in this session yet: the disk cache, else NVRTC, outside the lock so
  // that threads warming up different programs compile side by side. An
  // entry that is invalid or that the driver refuses is compiled again and
  // replaced.
  Program prog;
  bool ready = false;
  void *block = NULL;
  const char **lowered = NULL;
  const void *image = NULL;
  size_t image_bytes = 0;
  int cached = gk_jit_cache_read(key, count, names, &block, &lowered, &image, &image_bytes);
  if (cached == 0) {
    std::vector<std::string> low(lowered, lowered + count);
    gk_error ignored;
    gk_error_clear(&ignored);
    ready = load(image, low, &prog, &ignored);
    if (ready) gk_jit_count(0, 1, 0, 0, 0);
    else cached = 2;
  }
  free(block);
  if (!ready) {
    Compiled c;
    const auto t0 = std::chrono::steady_clock::now();
    compile_announced(source, name_list, t, what, &c);
    if (c.status) {
      *err = c.err;
      return c.status;
    }
    if (!load(c.image.data(), c.lowered, &prog, err)) return err->status;
    std::vector<const char *> low;
    for (const std::string &s : c.lowered) low.push_back(s.c_str());
    {
      std::lock_guard<std::mutex> guard(lock);   // one writer of the directory at a time
      gk_jit_cache_write(key, count, names, low.data(), c.image.data(), c.image.size());
    }
    gk_jit_count(1, 0, cached == 2 ? 1 : 0, seconds_since(t0), 0);
  }
  std::lock_guard<std::mutex> guard(lock);
  auto found = programs.find(memory_key);
  if (found == programs.end()) {
    found = programs.emplace(memory_key, prog).first;
    gk_jit_count(0, 0, 0, 0, 1);
  }
  for (int i = 0; i < count; i++) kernels[i] = found->second.kernels[(size_t) i];
  return GK_OK;
}

extern "C" gk_status gk_jit_compile_check(const char *source, int count, const char *const *names,
                                          int arch, const char *what, gk_error *err)
{
  if (!gk_jit_configured())
    return gk_fail(err, GK_ERR_INTERNAL, "the GPU kernel sources were not found (the package's "
                   "include directory); reinstall gpukernels");
  Target t;
  if (target_for(arch, &t, err)) return err->status;
  Compiled c;
  compile(source, std::vector<std::string>(names, names + count), t, what, &c);
  if (c.status) *err = c.err;
  return c.status;
}

extern "C" void gk_jit_forget(void)
{
  std::lock_guard<std::mutex> guard(lock);
  // The libraries stay loaded (their kernels may still be in use); only the
  // lookup forgets them, so the next call goes to the disk cache.
  gk_jit_count(0, 0, 0, 0, -(double) programs.size());
  programs.clear();
}
