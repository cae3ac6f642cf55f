"""sphere_flow config. Defaults are the ``small`` preset (a few minutes on 2 CPU cores);
``paper`` has the authors' scale (N = 2·10⁴ tokens, the β grid of the k* table, d = 2 and 3)."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ...config import Section, StudyConfig
from .simulate import Clustering as ClusterDefaults

Form = Literal["usa", "sa"]
Beta = Annotated[float, Field(gt=0, le=500)]


class Circle(Section):
    """d = 2 from n i.i.d. uniform tokens, through the linear phase: which Fourier mode
    dominates when the largest amplitude reaches ``threshold``, and how fast k* grew."""

    betas: list[Beta] = Field([1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30], min_length=1)
    """the k* table of the paper notes"""
    seeds: int = Field(10, ge=1)
    n: int = Field(2000, ge=2)
    forms: list[Form] = Field(["usa", "sa"], min_length=1)
    after_linear: float = Field(0.5, ge=0)
    """seed 0 (the one plotted) keeps integrating this long past the end of the linear phase (time
    units of 1/λ_{k*}); the other seeds stop there"""


class Metastable(Section):
    """d = 2 over a long horizon: cluster formation, the plateau of the first clustered
    configuration, merging."""

    betas: list[Beta] = Field([2, 3, 4, 5, 6, 8, 10], min_length=1)
    seeds: int = Field(4, ge=1)
    n: int = Field(2000, ge=2)
    forms: list[Form] = Field(["usa"], min_length=1)
    horizon: float = Field(1000.0, gt=0)
    """time units of 1/λ_{k*}; runs end earlier once a single cluster is left"""
    snapshots: int = Field(8, ge=0)
    """configurations kept (seed 0) for the snapshot figure"""


class Sphere(Section):
    """d >= 3 through the linear phase: the dominant spherical-harmonic degree."""

    d: int = Field(3, ge=2)
    betas: list[Beta] = Field([3, 5, 6, 10, 20], min_length=1)
    seeds: int = Field(6, ge=1)
    n: int = Field(1000, ge=2)
    forms: list[Form] = Field(["usa"], min_length=1)
    after_linear: float = Field(3.0, ge=0)
    """seed 0 runs this long past the linear phase (drawn at the end: clusters on the sphere)"""


class MetastableN(Section):
    """d = 2 at one β over token counts n: how long the k*-cluster state lasts once the k*
    pattern has formed (the paper: close to the meta-stable manifold in the limit of many tokens)."""

    beta: Beta = 2.0
    """k* = 2, the best-separated β of the table (λ_2/λ_3 = 1.44): the first clusters are the k* ones"""
    ns: list[Annotated[int, Field(ge=2)]] = Field([250, 1000, 4000, 16000], min_length=2)
    seeds: int = Field(24, ge=2)
    """independent starts per n"""
    form: Form = "usa"
    horizon: float = Field(400.0, gt=0)
    """time units of 1/λ_{k*}; runs end earlier once a single cluster is left"""


class Pde(Section):
    """The d = 2 mean-field equation from uniform + white noise (the paper's Fig. 4), by the
    authors' scheme: Lax–Friedrichs on their grid, their noise, their horizon."""

    beta: Beta = 5.0
    sigma: float = Field(0.01, gt=0, le=0.025)
    """absolute white noise per cell, u = 1/2π + σ ξ (the notebook's); at most 0.025 so that no cell
    starts negative (1/2π is 6.4 standard deviations at σ = 0.025)"""
    grid: int = Field(9999, ge=32)
    """cells: the notebook's linspace(0, 2π, 10⁴) without its endpoint"""
    seeds: int = Field(16, ge=1)
    """noise realisations; a share of 16 can clear 0.8 with its Wilson interval (16/16 gives [0.81, 1]), 8 cannot"""
    form: Form = "usa"
    horizon: float = Field(9.3, gt=0)
    """time units of 1/λ_{k*}: the notebook's T = 0.5 at β = 5 is λ_3 T = 9.30"""
    courant: float = Field(0.785, gt=0, le=1)
    """dt·sup|v|/dθ (Lax–Friedrichs is stable up to 1); 0.785 is the notebook's dt = 0.02 dθ at β = 5"""


class Clustering(Section):
    """Clusters on the circle: sorted angles split at gaps wider than ``gap``; groups under
    ``min_mass`` are stragglers; clustered when every other group spans at most ``extent``."""

    gap: float = Field(ClusterDefaults.gap, gt=0, lt=3.2)
    extent: float = Field(ClusterDefaults.extent, gt=0, lt=6.3)
    min_mass: float = Field(ClusterDefaults.min_mass, gt=0, lt=1)


class Config(StudyConfig):
    threshold: float = Field(0.2, gt=0, lt=1)
    """mode amplitude a_ℓ at which the linear phase is taken to end (2a is the relative density
    modulation of that mode on the circle)"""
    separation: float = Field(1.1, ge=1)
    """β whose top two predicted rates are closer than this ratio are left out of the mode claims"""
    integrator: Literal["dopri5", "rk4"] = "dopri5"
    """dopri5: adaptive Dormand–Prince 5(4); rk4: fixed step rk4_safety / (Lipschitz bound)"""
    rtol: float = Field(1e-6, gt=0, lt=1)
    atol: float = Field(1e-9, gt=0)
    rk4_safety: float = Field(1.0, gt=0)
    dt_obs: float = Field(0.1, gt=0)
    """observation interval through the linear phase (log-spaced observations after it)"""
    circle: Circle = Circle()
    metastable: Metastable = Metastable()
    sphere: Sphere = Sphere()
    metastable_n: MetastableN = MetastableN()
    pde: Pde = Pde()
    clustering: Clustering = Clustering()


PRESETS = {
    "smoke": {
        "circle": {"betas": [2, 5], "seeds": 2, "n": 500, "forms": ["sa"]},
        "metastable": {"betas": [2, 3], "seeds": 1, "n": 500, "horizon": 200.0, "snapshots": 5},
        "sphere": {"betas": [3], "seeds": 1, "n": 300, "after_linear": 1.0},
        "metastable_n": {"ns": [100, 400, 1600], "seeds": 3, "horizon": 100.0},
        "pde": {"grid": 999, "seeds": 2},
    },
    "small": {},
    "paper": {
        # The authors' notebook: N = 2e4 tokens, USA form, β = 5; the paper's k* table and Fig. 4.
        "rtol": 1e-8,
        "circle": {"seeds": 20, "n": 20_000},
        "metastable": {"betas": [2, 3, 4, 5, 6, 8, 10, 15, 20], "seeds": 10, "n": 20_000, "forms": ["usa", "sa"],
                       "horizon": 10_000.0},
        "sphere": {"betas": [3, 5, 6, 10, 20, 40], "seeds": 10, "n": 20_000, "forms": ["usa", "sa"]},
        "metastable_n": {"ns": [250, 1000, 4000, 16000, 64000, 256_000], "seeds": 32, "horizon": 2000.0},
        "pde": {"seeds": 32},
    },
}
