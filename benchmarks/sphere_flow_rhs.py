"""sphere_flow's two costs, each against a baseline run in the same process.

1. The velocity on the circle: the Fourier form (e^{β cos ψ} = Σ I_k(β) e^{ikψ}, O(nK)) against
   the direct n x n kernel (O(n²)), with the largest difference between them.
2. The integrators at equal accuracy: one run through the linear phase and cluster formation
   (d = 2, t in [0, 10] units of 1/λ_k*), error against a reference (adaptive, rtol 1e-11):
   adaptive Dormand–Prince with retraction at several rtol, fixed-step RK4 at the step of the
   Lipschitz bound and larger, and scipy's solve_ivp (RK45, DOP853) on the flattened coordinates
   with no retraction. Then the same over a long horizon (the meta-stable phase), where the
   adaptive step grows and the fixed one cannot.
3. One step of the PDE's Lax–Friedrichs scheme on the authors' grid (9999 cells): the velocity as
   a periodic convolution by FFT against the same sum formed directly (numpy's convolve; the
   notebook's conv1d does this O(M²) work per step), with the largest difference between them.

    python benchmarks/sphere_flow_rhs.py [--n 1000] [--beta 5] [--form usa] [--grid 9999]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.integrate import solve_ivp

from iclr_ray.studies.sphere_flow import dynamics as dy
from iclr_ray.studies.sphere_flow import growth, pde


def per_call(f, repeat: int) -> float:
    f()
    start = time.perf_counter()
    for _ in range(repeat):
        f()
    return (time.perf_counter() - start) / repeat


def kernels(beta: float, form: str) -> None:
    print(f"velocity on the circle, beta = {beta:g}, {form.upper()} (K = {dy.fourier_cutoff(beta)} Fourier modes)")
    for n in (1000, 2000, 5000):
        X = dy.uniform_sphere(n, 2, np.random.default_rng(n))
        direct = per_call(lambda: dy.velocity(X, beta, form), 3)
        fourier = per_call(lambda: dy.circle_velocity(X, beta, form), 20)
        V = dy.velocity(X, beta, form)
        diff = np.abs(dy.circle_velocity(X, beta, form) - V).max() / np.abs(V).max()
        print(f"  n = {n:5d}: direct {direct * 1e3:8.2f} ms, Fourier {fourier * 1e3:6.2f} ms, "
              f"{direct / fourier:6.1f}x; largest relative difference {diff:.1e}")


def integrators(n: int, beta: float, form: str, horizon: float, long: float) -> None:
    k = growth.k_star(beta, 2)
    rate = float(growth.rates(beta, 2, [k], form)[0])
    X0 = dy.uniform_sphere(n, 2, np.random.default_rng(0))
    evals = [0]

    def f(X):
        evals[0] += 1
        return dy.circle_velocity(X, beta, form, rate)

    t_obs = np.array([0.0, horizon])

    def ours(method: str, **kw):
        end = {}
        evals[0] = 0
        start = time.perf_counter()
        dy.integrate(X0, f, t_obs, lambda t, X: end.__setitem__("X", X) or False, method=method, **kw)
        return end["X"], time.perf_counter() - start, evals[0]

    def scipy(method: str, rtol: float):
        evals[0] = 0
        start = time.perf_counter()
        sol = solve_ivp(lambda t, y: f(y.reshape(n, 2)).ravel(), (0.0, horizon), X0.ravel(), method=method,
                        rtol=rtol, atol=rtol * 1e-3)
        return sol.y[:, -1].reshape(n, 2), time.perf_counter() - start, evals[0]

    ref, _, _ = ours("dopri5", rtol=1e-11, atol=1e-14)
    lip = dy.lipschitz_bound(beta, form, rate)
    print(f"\nintegrators, n = {n}, beta = {beta:g}, {form.upper()}, t in [0, {horizon:g}] (units of 1/lambda_{k}); "
          f"Lipschitz bound {lip:.3g} -> RK4 step {1 / lip:.2e}")
    rows = []
    for rtol in (1e-4, 1e-6, 1e-8):
        rows.append((f"dopri5 rtol {rtol:g} (retraction)", *ours("dopri5", rtol=rtol, atol=rtol * 1e-3)))
    for mult in (1, 4, 16):
        rows.append((f"rk4 dt = {mult}/L (retraction)", *ours("rk4", dt=mult / lip)))
    for method in ("RK45", "DOP853"):
        for rtol in (1e-6, 1e-8):
            rows.append((f"scipy {method} rtol {rtol:g} (no retraction)", *scipy(method, rtol)))
    print(f"  {'method':38s} {'evals':>7s} {'seconds':>8s} {'max error':>10s} {'max ||x|-1|':>12s}")
    for name, X, seconds, ev in rows:
        err = np.abs(X - ref).max() if np.all(np.isfinite(X)) else np.inf
        drift = np.abs(np.linalg.norm(X, axis=1) - 1).max()
        print(f"  {name:38s} {ev:7d} {seconds:8.2f} {err:10.1e} {drift:12.1e}")
    good = [(s, name) for name, X, s, ev in rows if np.abs(X - ref).max() <= 1e-6]
    if good:
        best = min(good)
        rk4 = [s for name, X, s, ev in rows if name.startswith("rk4 dt = 1/L")][0]
        print(f"  fastest within 1e-6: {best[1]} ({best[0]:.2f} s); rk4 at the Lipschitz step took "
              f"{rk4:.2f} s ({rk4 / best[0]:.1f}x)")
    t_obs[1] = long
    ref, _, _ = ours("dopri5", rtol=1e-10, atol=1e-13)
    print(f"\n  long horizon t in [0, {long:g}] (clusters form, then sit on their plateau):")
    for name, (X, seconds, ev) in (("dopri5 rtol 1e-6 (the study's default)", ours("dopri5", rtol=1e-6, atol=1e-9)),
                                   ("rk4 dt = 4/L", ours("rk4", dt=4 / lip))):
        print(f"  {name:38s} {ev:7d} {seconds:8.2f} {np.abs(X - ref).max():10.1e}")


def pde_step(beta: float, form: str, M: int) -> None:
    sol = pde.LaxFriedrichs(beta, M, form)
    u = pde.white_noise_start(M, 0.01, seed=0)
    x = pde.grid(M)

    K = -np.exp(beta * (np.cos(x) - 1)) * np.sin(x)  # tabulated once, as the notebook does

    def direct(u):  # v_j = dθ Σ_m K(θ_j − θ_m) u_m: a direct (O(M²)) convolution with u repeated once
        return np.convolve(np.concatenate([u, u]), K)[M:2 * M] * sol.dx * sol.scale

    fast = per_call(lambda: sol.step(u), 50)
    slow = per_call(lambda: direct(u), 3)
    diff = np.abs(direct(u) - sol.velocity(u)).max() / np.abs(sol.velocity(u)).max()
    steps = int(np.ceil(9.3 / sol.dt))
    print(f"\nPDE, Lax-Friedrichs on {M} cells, beta = {beta:g}, {form.upper()}: one step (FFT velocity) "
          f"{fast * 1e3:.2f} ms; the direct velocity sum alone {slow * 1e3:.0f} ms ({slow / fast:.0f}x); largest "
          f"relative difference {diff:.1e}; {steps} steps to t = 9.3 (the notebook's T = 0.5 at beta = 5): "
          f"{steps * fast:.1f} s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--beta", type=float, default=5.0)
    p.add_argument("--form", choices=dy.FORMS, default="usa")
    p.add_argument("--horizon", type=float, default=10.0)
    p.add_argument("--long", type=float, default=200.0)
    p.add_argument("--grid", type=int, default=9999)
    args = p.parse_args()
    kernels(args.beta, args.form)
    integrators(args.n, args.beta, args.form, args.horizon, args.long)
    pde_step(args.beta, args.form, args.grid)


if __name__ == "__main__":
    main()
