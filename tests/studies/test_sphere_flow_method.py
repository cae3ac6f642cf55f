"""sphere_flow's mathematics without Ray: growth rates (closed form, quadrature, the k* tables),
the particle velocities in their three forms, the energy and the sphere constraint along the
integrators, the PDE's mass and linear growth, and the observables."""
import math

import numpy as np
import pytest
from scipy import special

from iclr_ray.studies.sphere_flow import dynamics as dy
from iclr_ray.studies.sphere_flow import growth, observables as ob, pde


@pytest.mark.parametrize("d", [2, 3, 4, 5])
@pytest.mark.parametrize("beta", [0.7, 2.0, 5.0, 13.0, 30.0])
def test_closed_form_rates_equal_funk_hecke_quadrature(d, beta):
    ells = np.arange(1, 9)
    closed = growth.rates(beta, d, ells)
    quad = np.array([growth.rate_quadrature(beta, d, int(ell)) for ell in ells])
    # quadrature loses digits to cancellation where λ_ℓ is tiny (small β, large ℓ): ~1e-8 there
    np.testing.assert_allclose(closed, quad, rtol=1e-6)


def test_rates_reduce_to_bessel_forms_in_d2_and_d3():
    for beta in (1.0, 5.0, 20.0):
        k = np.arange(1, 12)
        np.testing.assert_allclose(growth.rates(beta, 2, k), k**2 * special.iv(k, beta) / beta, rtol=1e-12)
        np.testing.assert_allclose(growth.rates(beta, 3, k), k * (k + 1) * special.spherical_in(k, beta) / beta,
                                   rtol=1e-12)


def test_sa_rates_are_usa_rates_over_the_uniform_normaliser():
    for d, beta in ((2, 5.0), (3, 10.0), (4, 3.0)):
        ells = np.arange(1, 10)
        np.testing.assert_allclose(growth.rates(beta, d, ells, "sa"),
                                   growth.rates(beta, d, ells) / growth.normaliser_uniform(beta, d), rtol=1e-12)
    assert growth.normaliser_uniform(5.0, 2) == pytest.approx(special.iv(0, 5.0))
    assert growth.normaliser_uniform(5.0, 3) == pytest.approx(math.sinh(5.0) / 5.0)  # mean of e^{βs} over S²


@pytest.mark.parametrize("d, table", [
    (2, {1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 3, 8: 4, 9: 4, 10: 4, 15: 5, 20: 6, 30: 8}),
    (3, {5: 3, 10: 4, 20: 6, 40: 8}),
])
def test_k_star_tables(d, table):
    assert {b: growth.k_star(b, d) for b in table} == table
    for beta in table:  # the same in both forms
        ells = np.arange(1, growth.max_degree(beta) + 1)
        assert ells[np.argmax(growth.rates(beta, d, ells, "sa"))] == table[beta]


def test_separation_is_the_ratio_of_the_two_largest_rates():
    rates = np.sort(growth.rates(5.0, 2, np.arange(1, 20)))
    assert growth.separation(5.0, 2) == pytest.approx(rates[-1] / rates[-2])
    assert growth.separation(2.0, 2) > 1.4 > growth.separation(10.0, 2)
    with pytest.raises(ValueError, match="ℓ >= 1"):
        growth.rates(5.0, 2, [0, 1])


@pytest.mark.parametrize("form", dy.FORMS)
@pytest.mark.parametrize("beta", [0.5, 5.0, 30.0])
def test_angle_embedded_and_fourier_velocities_agree(form, beta):
    X = dy.uniform_sphere(300, 2, np.random.default_rng(1))
    theta = dy.to_angles(X)
    V = dy.velocity(X, beta, form, rate=3.0)
    tangent = np.stack([-np.sin(theta), np.cos(theta)], axis=1)
    angle = dy.angle_velocity(theta, beta, form, rate=3.0)
    np.testing.assert_allclose(np.einsum("ij,ij->i", V, tangent), angle, rtol=1e-10, atol=1e-12 * np.abs(angle).max())
    np.testing.assert_allclose(dy.circle_velocity(X, beta, form, rate=3.0), V, atol=1e-12 * np.abs(V).max())
    assert np.abs(np.einsum("ij,ij->i", V, X)).max() < 1e-12 * np.abs(V).max()  # tangent to the circle


def test_direct_kernel_in_blocks_equals_one_block(monkeypatch):
    X = dy.uniform_sphere(500, 3, np.random.default_rng(2))
    full = dy.velocity(X, 4.0, "sa")
    e_full = dy.interaction(X, 4.0)
    monkeypatch.setattr(dy, "BLOCK", 64)
    np.testing.assert_allclose(dy.velocity(X, 4.0, "sa"), full, rtol=1e-12, atol=1e-15)
    assert dy.interaction(X, 4.0) == pytest.approx(e_full, rel=1e-12)


def test_interaction_energy_on_the_circle_equals_the_double_sum():
    X = dy.uniform_sphere(400, 2, np.random.default_rng(3))
    for beta in (1.0, 8.0):
        assert dy.interaction(X, beta) == pytest.approx(np.mean(np.exp(beta * (X @ X.T - 1))), rel=1e-12)


@pytest.mark.parametrize("d", [2, 3])
def test_energy_rate_is_the_gradient_flow_dissipation(d):
    """dE/dt = (1/n) Σ|ẋ_i|² (USA) and (1/n) Σ Z_i |ẋ_i|² (SA), for E = (1/2βn²) Σ e^{β⟨x_i,x_j⟩}."""
    beta, n = 3.0, 200
    X = dy.uniform_sphere(n, d, np.random.default_rng(4))
    E = lambda Y: dy.interaction(Y, beta) * math.exp(beta) / (2 * beta)  # noqa: E731
    Z = np.exp(beta * (X @ X.T)).mean(axis=1)
    for form, weight in (("usa", np.ones(n)), ("sa", Z)):
        V = dy.velocity(X, beta, form)
        h = 1e-6
        numeric = (E(X + h * V) - E(X - h * V)) / (2 * h)
        assert numeric == pytest.approx(np.mean(weight * (V**2).sum(axis=1)), rel=1e-5)
        assert E(X - h * V) < E(X) < E(X + h * V)  # the opposite direction would lower it: the check can fail


@pytest.mark.parametrize("method", ["dopri5", "rk4"])
@pytest.mark.parametrize("d, form", [(2, "usa"), (2, "sa"), (3, "sa")])
def test_integrators_keep_tokens_on_the_sphere_and_raise_the_energy(method, d, form):
    beta = 4.0
    rate = float(growth.rates(beta, d, [growth.k_star(beta, d)], form)[0])
    X0 = dy.uniform_sphere(150, d, np.random.default_rng(5))
    f = (lambda X: dy.circle_velocity(X, beta, form, rate)) if d == 2 else (lambda X: dy.velocity(X, beta, form, rate))
    energies, states = [], []

    def observe(t, X):
        energies.append(dy.interaction(X, beta))
        states.append(X)
        return False

    dt = 0.5 / dy.lipschitz_bound(beta, form, rate) if method == "rk4" else None
    st = dy.integrate(X0, f, np.linspace(0, 8, 41), observe, method=method, dt=dt)
    assert np.abs(np.linalg.norm(states[-1], axis=1) - 1).max() < 1e-13
    assert 0 < st.max_defect < 1e-4
    assert np.all(np.diff(energies) >= -1e-12 * np.array(energies[:-1]))
    assert energies[-1] > 1.5 * energies[0]  # clusters formed: the energy rose, not merely did not fall


def test_adaptive_and_fixed_step_integrators_agree():
    beta, form = 5.0, "sa"
    rate = float(growth.rates(beta, 2, [3], form)[0])
    X0 = dy.uniform_sphere(200, 2, np.random.default_rng(6))
    f = lambda X: dy.circle_velocity(X, beta, form, rate)  # noqa: E731
    ends = {}
    for method, kw in (("dopri5", {"rtol": 1e-10, "atol": 1e-12}), ("rk4", {"dt": 2e-3})):
        dy.integrate(X0, f, np.array([0.0, 4.0]), lambda t, X: ends.__setitem__(method, X) or False,
                     method=method, **kw)
    assert np.abs(ends["dopri5"] - ends["rk4"]).max() < 1e-7
    with pytest.raises(ValueError, match="needs a step"):
        dy.integrate(X0, f, np.array([0.0, 1.0]), lambda t, X: False, method="rk4")


def test_mode_amplitudes_match_direct_sums():
    rng = np.random.default_rng(7)
    X = dy.uniform_sphere(300, 2, rng)
    theta = dy.to_angles(X)
    np.testing.assert_allclose(ob.mode_amplitudes(X, 5), [abs(np.exp(1j * k * theta).mean()) for k in range(1, 6)])
    for d in (3, 4):
        X = dy.uniform_sphere(300, d, rng)
        G = np.clip(X @ X.T, -1, 1)
        a = (d - 2) / 2
        direct = [np.sqrt(np.mean(special.eval_gegenbauer(ell, a, G) / special.eval_gegenbauer(ell, a, 1.0)))
                  for ell in range(1, 7)]
        np.testing.assert_allclose(ob.mode_amplitudes(X, 6), direct, rtol=1e-9)


def test_uniform_tokens_start_every_mode_at_one_over_sqrt_n():
    rng = np.random.default_rng(8)
    for d in (2, 3):
        power = np.mean([ob.mode_amplitudes(dy.uniform_sphere(400, d, rng), 6) ** 2 for _ in range(60)], axis=0)
        np.testing.assert_allclose(power * 400, 1.0, atol=0.35)


def test_linear_phase_reads_the_crossing_mode_and_the_slopes():
    t = np.linspace(0, 5, 51)
    amps = np.stack([0.03 * np.exp(0.5 * t), 0.01 * np.exp(1.0 * t), 0.02 * np.exp(0.8 * t)], axis=1)
    lin = ob.linear_phase(t, amps, threshold=0.5)
    assert lin["reached"] and lin["dominant"] == 2
    np.testing.assert_allclose(lin["slopes"], [0.5, 1.0, 0.8], rtol=1e-10)
    assert lin["t_end"] == pytest.approx(t[np.flatnonzero(amps.max(axis=1) >= 0.5)[0]])
    assert not ob.linear_phase(t, amps, threshold=10.0)["reached"]


def _clusters(centres, masses, width, n, rng, stragglers=0):
    parts = [c + width * rng.standard_normal(int(m * n)) for c, m in zip(centres, masses)]
    parts.append(rng.uniform(-np.pi, np.pi, stragglers))
    return dy.from_angles(np.concatenate(parts))


def test_circle_clusters_on_constructed_configurations():
    rng = np.random.default_rng(9)
    args = {"gap": 0.1, "extent": 0.3, "min_mass": 0.01}
    for k in (1, 2, 3, 5, 8):
        X = _clusters(np.linspace(-np.pi, np.pi, k, endpoint=False) + 0.3, [1 / k] * k, 0.01, 2000, rng)
        count, masses = ob.circle_clusters(X, **args)
        assert count == k and sum(masses) == pytest.approx(1.0, abs=1e-3)
    # a cluster straddling θ = ±π is one cluster; a few stragglers do not count
    X = _clusters([np.pi, 0.0], [0.5, 0.5], 0.02, 2000, rng, stragglers=5)
    assert ob.circle_clusters(X, **args)[0] == 2
    assert ob.circle_clusters(dy.uniform_sphere(2000, 2, rng), **args) == (0, [])  # no gap: not clustered
    X = _clusters([0.0, 2.0], [0.5, 0.5], 0.3, 2000, rng)  # two wide bumps: not (yet) clusters
    assert ob.circle_clusters(X, **args)[0] == 0


def test_plateau_of_the_first_configuration():
    t = np.arange(10.0)
    p = ob.plateau(t, np.array([0, 0, 3, 0, 3, 3, 2, 2, 2, 1]))
    assert (p["t_form"], p["count"], p["plateau"], p["merged"], p["censored"]) == (2.0, 3, 4.0, True, False)
    assert (p["longest"], p["longest_count"]) == (4.0, 3)  # 3 clusters for 4, then 2 for 3
    p = ob.plateau(t, np.array([0, 0, 0, 2, 2, 2, 2, 2, 2, 2]))
    assert p["censored"] and p["plateau"] == 6.0 and not p["merged"]
    p = ob.plateau(t, np.array([0, 0, 0, 1, 1, 1, 1, 1, 1, 1]))  # straight to one cluster: no plateau
    assert p["plateau"] == 0.0 and not p["censored"]
    assert not ob.plateau(t, np.zeros(10, int))["formed"]


def _perturbed(M, modes, size, rng):
    """The uniform density plus cosines of ``size`` at random phases in modes 1..modes (mass exactly 1)."""
    x = pde.grid(M)
    phases = 2 * np.pi * rng.random(modes)
    return (1 + size * sum(np.cos(k * x + p) for k, p in zip(range(1, modes + 1), phases))) / (2 * np.pi)


def test_velocity_is_the_periodic_convolution_of_the_pde():
    """v(θ_j) = dθ Σ_m K(θ_j − θ_m) u_m, K(ψ) = −e^{β cos ψ} sin ψ: the difference θ_j − θ_m, as in the
    PDE (the notebook's conv1d is a cross-correlation and forms θ_j + θ_m, the velocity of the
    mirrored density), and SA's division by dθ Σ_m e^{β cos(θ_j − θ_m)} u_m."""
    beta, M = 3.0, 256
    u = np.random.default_rng(11).random(M)
    x = pde.grid(M)
    diff = x[:, None] - x[None, :]
    K = (-np.exp(beta * np.cos(diff)) * np.sin(diff)) @ u * (2 * np.pi / M)
    E = np.exp(beta * np.cos(diff)) @ u * (2 * np.pi / M)
    for form, direct in (("usa", K), ("sa", K / E)):
        sol = pde.LaxFriedrichs(beta, M, form)
        np.testing.assert_allclose(sol.velocity(u) * sol.rate, direct, rtol=1e-10, atol=1e-12 * np.abs(direct).max())
    mirrored = (-np.exp(beta * np.cos(x[:, None] + x[None, :])) * np.sin(x[:, None] + x[None, :])) @ u
    assert np.abs(mirrored * (2 * np.pi / M) - K).max() > 0.1 * np.abs(K).max()  # the two orientations differ


def test_scheme_commutes_with_rotations_and_conserves_mass():
    """Shifting the start by s cells shifts the solution by s cells (the mirrored convolution would
    not); the mass is conserved to rounding and the density stays positive through clustering."""
    beta, M = 5.0, 999
    u0 = pde.white_noise_start(M, 0.01, seed=3)
    a = pde.solve(beta, u0, horizon=9.3, keep_density=1000)
    b = pde.solve(beta, np.roll(u0, 137), horizon=9.3, keep_density=1000)
    np.testing.assert_allclose(np.roll(a["rho_final"], 137), b["rho_final"], rtol=1e-9, atol=1e-12)
    assert np.abs(a["mass"] - 1).max() < 1e-12 and a["u_min"].min() > 0
    assert a["courant_max"] <= pde.COURANT * 1.001  # within the bound the step was chosen for
    assert a["amps"][-1].max() > 0.5  # clusters formed
    assert a["amps"][0].max() < 0.01  # from white noise, not a pattern put in by hand


@pytest.mark.parametrize("form", ["usa", "sa"])
def test_linear_phase_grows_each_mode_at_the_schemes_rate(form):
    """From a small perturbation, log A_k grows at the scheme's own rate log(G_k)/dt (exact for the
    linearised Lax–Friedrichs step) and that rate tends to λ_k/λ_k* to first order in dθ."""
    beta = 5.0
    for M in (512, 2048):
        u0 = _perturbed(M, 6, 1e-9, np.random.default_rng(10))
        r = pde.solve(beta, u0, horizon=3.0, form=form, modes=6)
        assert np.abs(r["mass"] - 1).max() < 1e-13
        slopes = np.polyfit(r["t"], np.log(r["amps"]), 1)[0]
        np.testing.assert_allclose(slopes, pde.discrete_rates(beta, M, np.arange(1, 7), form), rtol=1e-5, atol=1e-7)
    continuum = growth.rates(beta, 2, np.arange(1, 7), form) / growth.rates(beta, 2, [3], form)
    err = [np.abs(pde.discrete_rates(beta, M, np.arange(1, 7), form) - continuum).max() for M in (1000, 10000)]
    assert err[1] < 0.04 and 8 < err[0] / err[1] < 12  # first order: ten times finer, ten times closer


@pytest.mark.parametrize("beta", [2.0, 5.0, 10.0, 20.0])
def test_k_star_is_the_fastest_mode_of_the_integrated_pde(beta):
    """k* from the closed form against growth rates measured by integrating the scheme (2048 cells)."""
    M = 2048
    r = pde.solve(beta, _perturbed(M, 12, 1e-8, np.random.default_rng(12)), horizon=2.0, modes=12)
    slopes = np.polyfit(r["t"], np.log(r["amps"]), 1)[0]
    assert int(np.argmax(slopes) + 1) == growth.k_star(beta, 2)


def test_sup_velocity_bounds_every_density():
    for beta in (0.5, 5.0, 30.0):
        psi = np.linspace(-np.pi, np.pi, 200_001)
        brute = np.max(np.exp(beta * np.cos(psi)) * np.sin(psi))
        assert pde.sup_velocity(beta, "usa") == pytest.approx(brute, rel=1e-8)
    assert pde.COURANT == pytest.approx(0.02 * pde.sup_velocity(5.0, "usa"), rel=1e-3)  # the notebook's dt = 0.02 dθ
