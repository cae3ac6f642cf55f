"""Linear growth rates of spherical-harmonic modes around the uniform state (our derivation).

The mean-field equation on S^{d-1} is ∂_t ρ + ∇·(ρ ∇(W*ρ)) = 0 with W(x, y) = e^{β⟨x,y⟩}/β
(the particle velocity P⊥_x ∫ e^{β⟨x,y⟩} y dρ(y) is the spherical gradient of W*ρ). Linearised
around the uniform density ρ_0 = 1/|S^{d-1}|, a spherical harmonic Y_ℓ of degree ℓ is an
eigenfunction of both W* (Funk–Hecke) and the Laplace–Beltrami operator (eigenvalue −ℓ(ℓ+d−2)):

    λ_ℓ = (|S^{d-2}|/|S^{d-1}|) · ℓ(ℓ+d−2)/β · ∫_{-1}^{1} e^{βs} C_ℓ^α(s)/C_ℓ^α(1) (1−s²)^{(d−3)/2} ds,

α = (d−2)/2 (for d = 2 the normalised Gegenbauer polynomial is the Chebyshev T_ℓ). The
Gegenbauer–Bessel integral ∫ e^{βs} C_ℓ^α(s)(1−s²)^{α−1/2} ds = π 2^{1−α} Γ(ℓ+2α)/(ℓ! Γ(α)) β^{−α} I_{ℓ+α}(β)
turns this into

    λ_ℓ = c_d ℓ(ℓ+d−2) I_{ℓ+α}(β) / β^{1+α},  c_d = Γ(d/2) 2^{1−α} Γ(2α) √π / (Γ((d−1)/2) Γ(α)),

so c_2 = 1 (λ_k = k² I_k(β)/β) and c_3 = √(π/2) (λ_ℓ = ℓ(ℓ+1) i_ℓ(β)/β, i_ℓ the modified
spherical Bessel function). The softmax-normalised (SA) dynamics divides the velocity by the
normaliser ∫ e^{β⟨x,y⟩} dρ(y), which is Z_0 = c_d I_α(β)/β^α at the uniform state, so
λ_ℓ^SA = ℓ(ℓ+d−2) I_{ℓ+α}(β) / (β I_α(β)): same k*, other time scale. Rates are returned as
logarithms where they can overflow (USA rates grow like e^β).
"""
from __future__ import annotations

import math

import numpy as np
from scipy import integrate, special

FORMS = ("usa", "sa")


def _log_c(d: int) -> float:
    """log c_d; the d = 2 value is the α -> 0 limit Γ(2α)/Γ(α) -> 1/2."""
    a = (d - 2) / 2
    ratio = math.log(0.5) if d == 2 else special.gammaln(2 * a) - special.gammaln(a)
    return (special.gammaln(d / 2) + (1 - a) * math.log(2) + ratio + 0.5 * math.log(math.pi)
            - special.gammaln((d - 1) / 2))


def _log_iv(nu: np.ndarray, beta: float) -> np.ndarray:
    """log I_nu(β) without overflow (exponentially scaled Bessel)."""
    return np.log(special.ive(nu, beta)) + beta


def log_rates(beta: float, d: int, ells, form: str = "usa") -> np.ndarray:
    """log λ_ℓ for ℓ >= 1 (closed form)."""
    if form not in FORMS:
        raise ValueError(f"unknown form {form!r}; known: {', '.join(FORMS)}")
    ell = np.asarray(ells, dtype=float)
    if np.any(ell < 1):
        raise ValueError("growth rates are defined for degrees ℓ >= 1 (ℓ = 0 is the conserved mass)")
    a = (d - 2) / 2
    out = np.log(ell * (ell + d - 2)) + _log_iv(ell + a, beta)
    if form == "sa":
        return out - math.log(beta) - _log_iv(np.array(a), beta)
    return out + _log_c(d) - (1 + a) * math.log(beta)


def rates(beta: float, d: int, ells, form: str = "usa") -> np.ndarray:
    """λ_ℓ (may overflow to inf for the USA form at β of several hundred)."""
    return np.exp(log_rates(beta, d, ells, form))


def normaliser_uniform(beta: float, d: int) -> float:
    """Z_0 = ∫ e^{β⟨x,y⟩} dσ(y)/|S^{d-1}|, the SA normaliser at the uniform state."""
    a = (d - 2) / 2
    return float(np.exp(_log_c(d) + _log_iv(np.array(a), beta) - a * math.log(beta)))


def _normalised_gegenbauer(ell: int, d: int, s):
    if d == 2:
        return special.eval_chebyt(ell, s)
    a = (d - 2) / 2
    return special.eval_gegenbauer(ell, a, s) / special.eval_gegenbauer(ell, a, 1.0)


def rate_quadrature(beta: float, d: int, ell: int) -> float:
    """λ_ℓ (USA) from the Funk–Hecke integral by adaptive quadrature, with no Bessel identity;
    the integrand is scaled by e^{-β} (so |integrand| <= 1, and 1e-14 is the absolute accuracy
    attainable) and the weight (1−s²)^{(d−3)/2} handled by quad's algebraic weight, so d = 2's
    endpoint singularity is integrated exactly."""
    def f(s):
        return np.exp(beta * (s - 1)) * _normalised_gegenbauer(ell, d, s)

    e = (d - 3) / 2
    val, _ = integrate.quad(f, -1, 1, weight="alg", wvar=(e, e), limit=200, epsabs=1e-14, epsrel=1e-10)
    log_area_ratio = (special.gammaln(d / 2) - special.gammaln((d - 1) / 2) - 0.5 * math.log(math.pi))
    return float(math.exp(log_area_ratio + beta) * ell * (ell + d - 2) / beta * val)


def max_degree(beta: float) -> int:
    """A degree beyond which λ_ℓ only falls (I_ν(β) decays fast once ν > β): search range for k*."""
    return int(max(8, 2 * math.sqrt(2 * beta) + 10))


def k_star(beta: float, d: int) -> int:
    """The most unstable degree argmax_{ℓ >= 1} λ_ℓ (the same for both forms)."""
    ells = np.arange(1, max_degree(beta) + 1)
    return int(ells[np.argmax(log_rates(beta, d, ells))])


def separation(beta: float, d: int) -> float:
    """λ_{k*} / (the second-largest λ_ℓ): how clearly the most unstable mode stands out."""
    lr = np.sort(log_rates(beta, d, np.arange(1, max_degree(beta) + 1)))
    return float(np.exp(lr[-1] - lr[-2]))
