#!/usr/bin/env python3
"""The anchors' side of inst/bench/anchors/run.sh: times KeOps and masspcf on
the arrays that data.R wrote, and writes DIR/anchor_times.tsv (case, anchor,
seconds, note) and DIR/anchor_<case>.f64 (a sample of each result, compared
with gpukernels' by gpukernels.R).

    python3 anchors.py --data DIR --parts keops,masspcf --keops K --masspcf M

K: a folder holding keopscore/ and pykeops/; M: a folder holding the masspcf
package folder with its built extension modules (run.sh builds them). A part
whose sources or modules are missing is reported and skipped. Times: median of
REPS calls after a warm-up, wall clock, from host arrays to the host result
(except the 2D case: y and b resident on the GPU), with torch.cuda.synchronize().
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

p = argparse.ArgumentParser()
p.add_argument("--data", required=True)
p.add_argument("--parts", default="keops,masspcf")
p.add_argument("--keops", default="")
p.add_argument("--masspcf", default="")
p.add_argument("--reps", type=int, default=int(os.environ.get("REPS", "5")))
args = p.parse_args()
parts = args.parts.split(",")
RANGE = 0.5   # the gaussian's range, as in gpukernels.R

times_path = os.path.join(args.data, "anchor_times.tsv")
if not os.path.exists(times_path):
    with open(times_path, "w") as f:
        f.write("case\tanchor\tseconds\tnote\n")


def record(case, anchor, seconds, note="", sample=None):
    with open(times_path, "a") as f:
        f.write(f"{case}\t{anchor}\t{seconds:.6g}\t{note}\n")
    if sample is not None:
        np.asarray(sample, dtype=np.float64).ravel(order="F").tofile(
            os.path.join(args.data, f"anchor_{case}.f64"))
    print(f"{case:24s} {anchor:8s} {seconds:10.4g} s  {note}", flush=True)


def skip(case, anchor, why):
    with open(times_path, "a") as f:
        f.write(f"{case}\t{anchor}\tNA\t{why}\n")
    print(f"{case:24s} {anchor:8s} skipped: {why}", flush=True)


def load(name):
    with open(os.path.join(args.data, "manifest.tsv")) as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    shape = {r[0]: (int(r[1]), int(r[2]), r[3]) for r in rows}
    if name not in shape:
        raise FileNotFoundError(f"{name} is not in the data (run data.R with this part)")
    n, d, t = shape[name]
    a = np.fromfile(os.path.join(args.data, f"{name}.{t}"), dtype="<f8" if t == "f64" else "<i4")
    return a.reshape(d, n).T   # column-major on disk


def timed(fn, reps, warmup=True):
    """Median wall time of reps calls (after one warm-up call), and the last result."""
    if warmup:
        fn()
    ts, out = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), out


# ---------------------------------------------------------------- KeOps
KNN_KS = (1, 10, 32, 100)


def knn_case(k, prec):
    """knn_f32_1e5 for k = 10 (the first case, kept), knn_k<k>_f32_1e5 for the others."""
    return f"knn_{prec}_1e5" if k == 10 else f"knn_k{k}_{prec}_1e5"


def run_keops(knn_only=False):
    knn_cases = [knn_case(k, p) for p in ("f32", "f64") for k in KNN_KS]
    cases = knn_cases if knn_only else [
        "gauss_f32_1e6", "gauss_f64_1e6", "gauss_f32_1e4", "gauss_f64_1e4", "gauss2d_f32",
        "formula_gauss_f32_1e6", "formula_gauss_f64_1e6", "formula_gauss_f32_1e4",
        "formula_gauss_f64_1e4", "lse_f32_1e5", "lse_f64_1e5"] + knn_cases
    missing = [d for d in ("keopscore", "pykeops") if not os.path.isdir(os.path.join(args.keops, d))]
    if missing:
        for c in cases:
            skip(c, "KeOps", "no " + " or ".join(missing) + " under " + (args.keops or "(unset)"))
        return
    sys.path[:0] = [os.path.join(args.keops, "keopscore"), os.path.join(args.keops, "pykeops")]
    try:
        import torch
        from pykeops.torch import LazyTensor
    except Exception as e:   # noqa: BLE001 - any import failure skips the part
        for c in cases:
            skip(c, "KeOps", f"import failed: {e}")
        return
    if not torch.cuda.is_available():
        for c in cases:
            skip(c, "KeOps", "torch sees no GPU")
        return
    dev = torch.device("cuda")
    X, Y = load("x"), load("y")
    B = None if knn_only else load("b")

    def sync():
        torch.cuda.synchronize()

    def gauss_sum(x, y, b):
        D = ((LazyTensor(x[:, None, :]) - LazyTensor(y[None, :, :])) ** 2).sum(-1)
        return ((-D / (2 * RANGE * RANGE)).exp() * LazyTensor(b[None, :, :])).sum(dim=1)

    def host_call(f, dtype, *arrays):
        """f on arrays copied to the GPU (contiguous, in dtype), result back to the host."""
        def call():
            t = [torch.from_numpy(np.ascontiguousarray(a, dtype=dtype)).to(dev) for a in arrays]
            r = f(*t)
            r = tuple(q.cpu() for q in r) if isinstance(r, tuple) else r.cpu()
            sync()
            return r
        return call

    def knn(k):
        def f(x, y):
            D = ((LazyTensor(x[:, None, :]) - LazyTensor(y[None, :, :])) ** 2).sum(-1)
            return D.Kmin_argKmin(k, dim=1)
        return f

    for prec, dt in (("f32", np.float32), ("f64", np.float64)):
        for k in KNN_KS:
            # KeOps at k = 100 takes seconds per call: one timed call after the warm-up.
            s, r = timed(host_call(knn(k), dt, X[:10**5], Y[:10**5]), 1 if k >= 100 else args.reps)
            # Sample: 1-based indices of the first 100 rows (compared as sets of distances in R).
            record(knn_case(k, prec), "KeOps", s, f"k = {k}, values and indices",
                   sample=r[1].numpy()[:100].astype(np.float64) + 1)
    if knn_only:
        return

    for prec, dt in (("f32", np.float32), ("f64", np.float64)):
        for size, label in ((10**6, "1e6"), (10**4, "1e4")):
            case = f"gauss_{prec}_{label}"
            reps = args.reps if size < 10**6 or prec == "f32" else 3
            s, r = timed(host_call(gauss_sum, dt, X[:size], Y[:size], B[:size, None]), reps)
            record(case, "KeOps", s, sample=r.numpy()[:1000])
            # KeOps' gaussian is itself a LazyTensor formula: the anchor of
            # gpukernels' gk_formula() gaussian as well (issue 39)
            record("formula_" + case, "KeOps", s, "the same LazyTensor formula",
                   sample=r.numpy()[:1000])

    # 2D scheme: M = 1e3 rows against N = 1e7 resident points.
    yb = torch.from_numpy(np.ascontiguousarray(load("y_big"), dtype=np.float32)).to(dev)
    bb = torch.from_numpy(np.ascontiguousarray(load("b_big"), dtype=np.float32)).to(dev)

    def call2d():
        x = torch.from_numpy(np.ascontiguousarray(X[:1000], dtype=np.float32)).to(dev)
        r = gauss_sum(x, yb, bb).cpu()
        sync()
        return r
    s, r = timed(call2d, args.reps)
    record("gauss2d_f32", "KeOps", s, "y, b on the GPU", sample=r.numpy())
    del yb, bb

    def lse(x, y):
        D = ((LazyTensor(x[:, None, :]) - LazyTensor(y[None, :, :])) ** 2).sum(-1)
        return (-D / (2 * RANGE * RANGE)).exp().logsumexp(dim=1)

    for prec, dt in (("f32", np.float32), ("f64", np.float64)):
        s, r = timed(host_call(lse, dt, X[:10**5], Y[:10**5]), args.reps)
        record(f"lse_{prec}_1e5", "KeOps", s, "log sum exp(gaussian)", sample=r.numpy()[:1000])


# ---------------------------------------------------------------- masspcf
def run_masspcf():
    cases = ["pdist_l1_f32_5e4", "pdist_l1_f64_2e4", "l2_kernel_f32_2e4", "pdist_cpu_f32_5e3"]
    pkg = os.path.join(args.masspcf, "masspcf")
    built = os.path.isdir(pkg) and any(n.startswith("_mpcf_cuda") for n in os.listdir(pkg))
    if not built:
        for c in cases:
            skip(c, "masspcf", f"no built masspcf (with _mpcf_cuda*) under {args.masspcf or '(unset)'}")
        return
    # The parent of the package folder (its random.py would shadow the standard
    # library's), after the stub _gpu_detect that run.sh writes there.
    sys.path.insert(0, args.masspcf)
    try:
        import masspcf as mpcf
    except Exception as e:   # noqa: BLE001
        for c in cases:
            skip(c, "masspcf", f"import failed: {e}")
        return
    backend = getattr(getattr(mpcf, "_mpcf_cpp", None), "_backend", None)
    print("masspcf backend:", getattr(backend, "__name__", backend), flush=True)
    mpcf.system.set_device_verbose(True)
    counts = load("pcf_counts")[:, 0]
    T, V = load("pcf_t")[:, 0], load("pcf_v")[:, 0]
    ends = np.cumsum(counts)
    starts = ends - counts

    def functions(n, dt):
        return mpcf.PcfTensor([mpcf.Pcf(np.stack([T[a:e], V[a:e]], axis=1).astype(dt))
                               for a, e in zip(starts[:n], ends[:n])])

    reps = min(args.reps, 3)
    warm32, warm64 = functions(10, np.float32), functions(10, np.float64)

    def row0(m, n):
        return np.array([m[0, j] for j in range(min(n, 200))])

    mpcf.system.force_cpu(False)
    mpcf.system.set_cuda_threshold(0)
    mpcf.pdist(warm32)
    fs = functions(50000, np.float32)
    s, d = timed(lambda: mpcf.pdist(fs, p=1), reps, warmup=False)
    record("pdist_l1_f32_5e4", "masspcf", s, "GPU", sample=row0(d, 50000))
    fs = functions(20000, np.float64)
    mpcf.pdist(warm64)
    s, d = timed(lambda: mpcf.pdist(fs, p=1), reps, warmup=False)
    record("pdist_l1_f64_2e4", "masspcf", s, "GPU", sample=row0(d, 20000))
    fs = functions(20000, np.float32)
    mpcf.l2_kernel(warm32)
    s, k = timed(lambda: mpcf.l2_kernel(fs), reps, warmup=False)
    record("l2_kernel_f32_2e4", "masspcf", s, "GPU", sample=row0(k, 20000))
    mpcf.system.force_cpu(True)
    fs = functions(5000, np.float32)
    mpcf.pdist(warm32)
    s, d = timed(lambda: mpcf.pdist(fs, p=1), reps, warmup=False)
    record("pdist_cpu_f32_5e3", "masspcf", s, f"CPU, {os.cpu_count()} threads", sample=row0(d, 5000))


if "keops" in parts:
    run_keops()
elif "knn" in parts:
    run_keops(knn_only=True)
if "masspcf" in parts:
    run_masspcf()
