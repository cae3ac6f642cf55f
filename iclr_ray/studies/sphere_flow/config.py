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
    seeds: int = Field(3, ge=1)
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
    seeds: int = Field(4, ge=1)
    n: int = Field(1000, ge=2)
    forms: list[Form] = Field(["usa"], min_length=1)
    after_linear: float = Field(3.0, ge=0)
    """seed 0 runs this long past the linear phase (drawn at the end: clusters on the sphere)"""


class Pde(Section):
    """The d = 2 mean-field equation from uniform + white noise (the paper's Fig. 4)."""

    beta: Beta = 5.0
    sigma: float = Field(0.01, gt=0, lt=1)
    """relative white noise per grid point"""
    grid: int = Field(1024, ge=32)
    seeds: int = Field(8, ge=1)
    """noise realisations"""
    form: Form = "usa"
    horizon: float = Field(40.0, gt=0)
    """time units of 1/λ_{k*}; the solver stops earlier once under-resolved"""
    tail_tol: float = Field(1e-2, gt=0)
    """under-resolved once a mode in the top half of the kept ones reaches this amplitude"""


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
    pde: Pde = Pde()
    clustering: Clustering = Clustering()


PRESETS = {
    "smoke": {
        "circle": {"betas": [2, 5], "seeds": 2, "n": 500, "forms": ["sa"]},
        "metastable": {"betas": [2, 3], "seeds": 1, "n": 500, "horizon": 200.0, "snapshots": 5},
        "sphere": {"betas": [3], "seeds": 1, "n": 300, "after_linear": 1.0},
        "pde": {"grid": 256, "seeds": 2},
    },
    "small": {},
    "paper": {
        # The authors' notebook: N = 2e4 tokens, USA form, β = 5; the paper's k* table and Fig. 4.
        "rtol": 1e-8,
        "circle": {"seeds": 20, "n": 20_000},
        "metastable": {"betas": [2, 3, 4, 5, 6, 8, 10, 15, 20], "seeds": 10, "n": 20_000, "forms": ["usa", "sa"],
                       "horizon": 10_000.0},
        "sphere": {"betas": [3, 5, 6, 10, 20, 40], "seeds": 10, "n": 20_000, "forms": ["usa", "sa"]},
        "pde": {"grid": 4096, "seeds": 32},
    },
}
