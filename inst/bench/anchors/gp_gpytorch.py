#!/usr/bin/env python3
"""GPyTorch's side of inst/bench/anchors/gp_side.sh: the exact marginal
log-likelihood and its gradient per evaluation (Matern 3/2, constant mean,
Gaussian noise), on the data gp_side.R wrote, at the parameters gp_side.R
used; then two fits at the smallest n: GPyTorch's usual Adam loop and a
converged one (L-BFGS on its exact Cholesky likelihood). Writes DIR/gpytorch.tsv.

    python3 gp_gpytorch.py --data DIR --sizes 20000,100000 [--keops K]

The package's Matern 3/2 is (1 + r / rho) exp(-r / rho); GPyTorch's is
(1 + sqrt(3) r / l) exp(-sqrt(3) r / l): l = sqrt(3) rho. GPyTorch's mll is
divided by n: times n here. Its value is stochastic (CG + Lanczos with
`num_trace_samples` probes): the spread over seeds is its error.
"""
import argparse
import math
import os
import signal
import statistics
import sys
import time

import numpy as np
import torch

p = argparse.ArgumentParser()
p.add_argument("--data", required=True)
p.add_argument("--sizes", default="20000")
p.add_argument("--keops", default="")
p.add_argument("--reps", type=int, default=5)
p.add_argument("--fit-iters", type=int, default=60)
# seconds one timed evaluation may take (0: no limit); one that takes longer
# is recorded as a lower bound on its time
p.add_argument("--eval-limit", type=float, default=0)
# the settings timed at the first size (the others: defaults), and whether
# the fits run (at the first size; the exact one needs the n x n matrix)
p.add_argument("--kinds", default="defaults,tight,accurate")
p.add_argument("--fits", type=int, default=1)
args = p.parse_args()
if args.keops:
    sys.path[:0] = [os.path.join(args.keops, "keopscore"), os.path.join(args.keops, "pykeops")]
import gpytorch  # noqa: E402
import linear_operator  # noqa: E402

dev = torch.device("cuda")
t_script = time.perf_counter()
out_path = os.path.join(args.data, "gpytorch.tsv")
with open(out_path, "w") as f:
    f.write("n\tsetting\tseconds\tloglik\tloglik_sd\tnote\n")


def record(n, setting, seconds, loglik, sd, note=""):
    line = f"{n}\t{setting}\t{seconds:.4f}\t{loglik:.4f}\t{sd:.4f}\t{note}"
    print(line, flush=True)
    with open(out_path, "a") as f:
        f.write(line + "\n")


def read(n, name, cols):
    a = np.fromfile(os.path.join(args.data, f"gp_{n}_{name}.f64"), dtype="<f8")
    return a.reshape(cols, -1).T if cols > 1 else a


class GP(gpytorch.models.ExactGP):
    def __init__(self, x, y, lik, keops):
        super().__init__(x, y, lik)
        self.mean_module = gpytorch.means.ConstantMean()
        base = (gpytorch.kernels.keops.MaternKernel(nu=1.5) if keops
                else gpytorch.kernels.MaternKernel(nu=1.5))
        self.covar_module = gpytorch.kernels.ScaleKernel(base)

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def model_at(x, y, par, keops):
    lik = gpytorch.likelihoods.GaussianLikelihood(
        noise_constraint=gpytorch.constraints.GreaterThan(1e-6)).to(dev, torch.float64)
    m = GP(x, y, lik, keops).to(dev, torch.float64)
    m.covar_module.outputscale = par["variance"]
    m.covar_module.base_kernel.lengthscale = math.sqrt(3.0) * par["range"]
    lik.noise = par["nugget"]
    m.mean_module.constant.data.fill_(par["beta"])
    m.train()
    lik.train()
    return m, lik


class OverLimit(Exception):
    pass


def over_limit(signum, frame):
    raise OverLimit()


def evaluation(m, lik, x, y):
    """One marginal log-likelihood with its gradient (nats), synchronized;
    OverLimit after args.eval_limit seconds (Python regains control between
    the CG iterations' kernel launches, where the alarm is raised)."""
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, m)
    m.zero_grad()
    torch.cuda.synchronize()
    if args.eval_limit > 0:
        signal.signal(signal.SIGALRM, over_limit)
        signal.setitimer(signal.ITIMER_REAL, args.eval_limit)
    t0 = time.perf_counter()
    try:
        val = mll(m(x), y)
        (-val).backward()
        torch.cuda.synchronize()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return time.perf_counter() - t0, val.item() * len(y)


def settings(kind):
    if kind == "defaults":
        return []
    # tight: CG to 0.01 and 50 probes (the package's default count)
    tight = [gpytorch.settings.cg_tolerance(0.01), gpytorch.settings.eval_cg_tolerance(0.01),
             gpytorch.settings.num_trace_samples(50)]
    if kind == "tight":
        return tight
    # accurate: also a rank-100 pivoted-Cholesky preconditioner (default 15)
    # and up to 100 Lanczos steps for the log-determinant (default 20)
    return tight + [gpytorch.settings.max_preconditioner_size(100),
                    gpytorch.settings.max_lanczos_quadrature_iterations(100)]


def fit_adam(m, lik, x, y):
    """GPyTorch's usual loop: Adam, lr 0.1, at its default settings (CG + Lanczos)."""
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, m)
    opt = torch.optim.Adam(m.parameters(), lr=0.1)
    for it in range(args.fit_iters):
        opt.zero_grad()
        loss = -mll(m(x), y)
        loss.backward()
        opt.step()
    return loss.item(), f"Adam lr 0.1 x {args.fit_iters}, defaults"


def fit_exact(m, lik, x, y):
    """A converged fit: L-BFGS with a strong-Wolfe line search on the exact
    (Cholesky) likelihood, GPyTorch's own setting for it (max_cholesky_size)."""
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, m)
    opt = torch.optim.LBFGS(m.parameters(), lr=1, max_iter=200, tolerance_grad=1e-7,
                            tolerance_change=1e-12, history_size=20,
                            line_search_fn="strong_wolfe")
    calls = [0]

    def closure():
        calls[0] += 1
        opt.zero_grad()
        loss = -mll(m(x), y)
        loss.backward()
        return loss

    with gpytorch.settings.max_cholesky_size(10**7):
        opt.step(closure)
        loss = -mll(m(x), y)
    return loss.item(), f"L-BFGS on the Cholesky likelihood, {calls[0]} evaluations"


def fit(n, how):
    """A fit from the package's start values; `how` is fit_adam or fit_exact."""
    par = dict(zip(["variance", "range", "nugget", "beta"], read(n, "start", 1)))
    x = torch.tensor(read(n, "locs", 2), device=dev, dtype=torch.float64)
    y = torch.tensor(read(n, "y", 1), device=dev, dtype=torch.float64)
    m, lik = model_at(x, y, par, False)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    loss, what = how(m, lik, x, y)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    est = [m.covar_module.outputscale.item(),
           m.covar_module.base_kernel.lengthscale.item() / math.sqrt(3.0), lik.noise.item()]
    record(n, "fit " + how.__name__[4:], seconds, -loss * n, float("nan"),
           f"{what}: variance {est[0]:.5g} range {est[1]:.5g} nugget {est[2]:.5g}")
    del m, lik
    torch.cuda.empty_cache()


sizes = [int(float(s)) for s in args.sizes.split(",")]
compiled = set()      # KeOps compiles a formula once per process, for any n
for n in sizes:
    par = dict(zip(["variance", "range", "nugget", "beta"], read(n, "par", 1)))
    x = torch.tensor(read(n, "locs", 2), device=dev, dtype=torch.float64)
    y = torch.tensor(read(n, "y", 1), device=dev, dtype=torch.float64)
    keops = n > 20000 and bool(args.keops)
    for kind in (args.kinds.split(",") if n == sizes[0] else ["defaults"]):
        try:
            m, lik = model_at(x, y, par, keops)
            ctx = settings(kind)
            for c in ctx:
                c.__enter__()
            # warm-up (KeOps compiles its formula); beyond 1e5, where one
            # evaluation takes minutes, only if nothing compiled it yet
            if keops not in compiled or n <= 100000:
                evaluation(m, lik, x, y)
                compiled.add(keops)
            times, values = [], []
            for r in range(args.reps):
                print(f"n = {n}, {kind}: evaluation {r + 1} starts at "
                      f"{time.perf_counter() - t_script:.1f} s", flush=True)
                torch.manual_seed(100 + r)
                t, v = evaluation(m, lik, x, y)
                times.append(t)
                values.append(v)
            note = ("keops" if keops else "dense kernel") + \
                f"; cg_tol {gpytorch.settings.cg_tolerance.value()}" \
                f", probes {gpytorch.settings.num_trace_samples.value()}" \
                f", precond {gpytorch.settings.max_preconditioner_size.value()}" \
                f", max_cg {gpytorch.settings.max_cg_iterations.value()}" \
                f", lanczos {gpytorch.settings.max_lanczos_quadrature_iterations.value()}"
            for c in reversed(ctx):
                c.__exit__(None, None, None)
            record(n, kind, statistics.median(times), statistics.mean(values),
                   statistics.stdev(values) if len(values) > 1 else float("nan"), note)
        except OverLimit:
            torch.cuda.synchronize()
            record(n, kind, float("nan"), float("nan"), float("nan"),
                   f"one evaluation did not finish in {args.eval_limit:g} s "
                   f"(KeOps compiled at a smaller n)")
        except Exception as e:  # noqa: BLE001 (out of memory, time): say so, go on
            record(n, kind, float("nan"), float("nan"), float("nan"),
                   f"failed: {type(e).__name__}: {str(e)[:120]}")
        torch.cuda.empty_cache()
    if n == sizes[0] and args.fits:
        for how in (fit_exact, fit_adam):
            try:
                fit(n, how)
            except Exception as e:  # noqa: BLE001
                record(n, "fit", float("nan"), float("nan"), float("nan"), f"failed: {e}")
