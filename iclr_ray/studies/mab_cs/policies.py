"""The policies of the paper and its baselines, each advancing R independent runs at once (numpy
arrays of shape (R,) and (R, K)); R = 1 is one run. No Ray, no I/O.

Pairwise Elimination (PE, known reference arm ell) compares the candidate arms cheaper than ell
with ell, one at a time in cost order. Round m of an episode uses the proxy gap D = 2^-m; both
arms are sampled up to

    n(D) = ceil(2 ln(T D^2) / D^2)        with buffer  b(D) = sqrt(ln(T D^2) / (2 n(D)))

and then tested: the candidate j is accepted (and played until T) if (1 - alpha) mu_ell + b < mu_j - b,
eliminated (the next candidate's episode starts at D = 1) if mu_j + b < (1 - alpha) mu_ell - b,
otherwise D halves. With every cheaper arm eliminated, ell is played. The asymmetric variant keeps
a separate proxy gap for ell that is never reset, so ell's samples of earlier episodes keep their
tighter buffer.

PE-CS (subsidised best reward) first finds the best arm ell_hat by Improved UCB (Auer & Ortner):
every active arm is sampled to n(D) with D = 2^-(round), arms whose upper bound mu_i + b falls
below the best lower bound max(mu - b) are dropped, and the round advances. Then PE runs against
ell_hat with alpha applied to ell_hat's mean and buffer, each candidate starting at the round it
reached in the first phase (its samples are reused), and ell_hat's round leading the candidate's by
at most kappa.

The baselines of Sinha et al. (CS-UCB, CS-TS, CS-ETC) play the cheapest arm whose index is within
the (1 - alpha) factor of the reference index (the best index, or ell's with a known reference).

Where this follows the official code and where it departs is in docs/studies/mab_cs.md: rounds stop
at m_max (where T D^2 >= e, so n(D) stays positive), the PE-CS acceptance test uses ell_hat's own
buffer on ell_hat's side, PE-CS with ell_hat = 0 plays arm 0, and CS-ETC explores every arm exactly
tau times.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod

import numpy as np
from scipy.special import betaincinv

from .bandit import BINARISE, THETA, TIE, RewardModel, Setting, uniforms


def sample_size(D: np.ndarray | float, T: int) -> np.ndarray:
    """n(D) = ceil(2 ln(T D^2) / D^2): samples per arm in the round with proxy gap D."""
    D2 = np.asarray(D, float) ** 2
    return np.ceil(2.0 * np.log(T * D2) / D2)


def buffer(D: np.ndarray | float, T: int) -> np.ndarray:
    """b(D) = sqrt(ln(T D^2) / (2 n(D))), the confidence buffer of that round (about D / 2)."""
    D2 = np.asarray(D, float) ** 2
    return np.sqrt(np.log(T * D2) / (2.0 * sample_size(D, T)))


def max_round(T: int) -> int:
    """The last round m whose proxy gap 2^-m keeps T D^2 >= e (ln(T D^2) >= 1)."""
    return max(0, int(math.floor(0.5 * math.log2(T / math.e))))


def pe_bound(mu, cost, alpha: float, ell: int, T: int) -> dict:
    """PE's instance-dependent regret bound with this schedule's constants, on the good event that
    every estimate is within its buffer b(D) at every test (Hoeffding: each fails with probability at
    most 2/(T D^2)).

    With threshold thr = (1 - alpha) mu_ell and gap Delta_j = |mu_j - thr|, episode j ends (the
    candidate rejected or accepted, never wrongly) at the first round m with 4 b(2^-m) < Delta_j, so
    both arms are sampled at most G_j = n(2^-m) times; about 32 ln(T Delta_j^2 / 16) / Delta_j^2,
    the ln(T Delta^2)/Delta^2 order of the paper's bound. Candidates run in cost order up to the
    target a*; ell's samples carry over between episodes, so ell is pulled at most max_j G_j times.
    Hence

        quality regret <= sum_{j < a*} Delta_j G_j,     cost regret <= (c_ell - c_{a*}) max_{j <= a*} G_j

    (each capped at T times the largest step). A gap no round resolves (4 b > Delta_j at m_max)
    leaves G_j = T: no bound."""
    mu, c = np.asarray(mu, float), np.asarray(cost, float)
    thr = (1.0 - alpha) * mu[ell]
    a_star = int(np.flatnonzero(mu[: ell + 1] >= thr - 1e-12)[0])
    D = 2.0 ** -np.arange(max_round(T) + 1)
    four_b = 4.0 * buffer(D, T)

    def pulls(gap: float) -> int:
        ok = np.flatnonzero(four_b < gap)
        return int(min(sample_size(D[ok[0]], T), T)) if ok.size else int(T)

    cands = range(a_star + 1) if a_star < ell else range(ell)
    G = {j: pulls(abs(mu[j] - thr)) for j in cands}
    quality = sum((thr - mu[j]) * G[j] for j in cands if j < a_star)
    cost_bound = (c[ell] - c[a_star]) * max(G.values()) if a_star < ell and G else 0.0
    return {"target": a_star, "pulls": G, "quality": float(min(quality, T * max(thr - mu.min(), 0.0))),
            "cost": float(min(cost_bound, T * (c[ell] - c[a_star])))}


def etc_tau(T: int, K_play: int, factor: float) -> int:
    """CS-ETC's pulls of every arm before it commits: factor * ceil((T/K)^(2/3))."""
    return int(factor * math.ceil((T / K_play) ** (2.0 / 3.0)))


def exploration_end(name: str, K_play: int, T: int, etc_factor: float = 5.0) -> int:
    """The last step of a policy's fixed exploration: CS-ETC's K tau round-robin pulls, the index
    policies' first pull of every arm; 0 for PE and PE-CS, whose exploration is adaptive (it ends
    when a run settles, at a different step in every run)."""
    if name == "cs_etc":
        return min(T, K_play * etc_tau(T, K_play, etc_factor))
    return K_play if name in ("cs_ucb", "cs_ts") else 0


class Policy(ABC):
    """Statistics shared by every policy: pulls n and reward sums of each arm in each run."""

    name = "policy"

    def __init__(self, cost: np.ndarray, T: int, keys: np.ndarray, alpha: float, setting: Setting,
                 ell: int | None = None, reward_model: RewardModel = "bernoulli"):
        self.cost = np.asarray(cost, float)
        self.K, self.T, self.keys, self.alpha = len(self.cost), int(T), np.asarray(keys), float(alpha)
        self.R = len(self.keys)
        self.setting, self.ell, self.reward_model = setting, ell, reward_model
        if setting == "known_ref" and not (ell is not None and 0 <= ell < self.K):
            raise ValueError(f"known_ref needs a reference arm ell in 0..{self.K - 1}, got {ell}")
        self.n = np.zeros((self.R, self.K), np.int64)
        self.s = np.zeros((self.R, self.K))
        self.rows = np.arange(self.R)
        self.last = np.zeros(self.R, np.int64)

    @property
    def mu_hat(self) -> np.ndarray:
        return self.s / np.maximum(self.n, 1)

    @abstractmethod
    def select(self, t: int) -> np.ndarray:
        """The arm each run pulls at step t (1-based)."""

    def update(self, t: int, arms: np.ndarray, rewards: np.ndarray) -> None:
        self.n[self.rows, arms] += 1
        self.s[self.rows, arms] += rewards
        self.last = arms

    def settled(self) -> np.ndarray:
        """Runs that will pull ``last`` at every later step whatever they observe (so an engine
        may account their remaining steps in one block)."""
        return np.zeros(self.R, bool)

    def state(self) -> dict[str, np.ndarray]:
        """Everything that decides the next pulls (a checkpoint of the policy)."""
        return {k: v.copy() for k, v in vars(self).items() if isinstance(v, np.ndarray)}

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        for k, v in state.items():
            setattr(self, k, np.array(v))


class PairwiseElimination(Policy):
    """PE with a known reference arm ell (``asymmetric``: ell's proxy gap is never reset)."""

    name = "pe"

    def __init__(self, *args, asymmetric: bool = False, **kw):
        super().__init__(*args, **kw)
        if self.setting != "known_ref":
            raise ValueError("PE needs the known reference arm setting (PE-CS is its subsidised-best form)")
        self.asymmetric = asymmetric
        if asymmetric:
            self.name = "pe_asym"
        self.m_max = max_round(self.T)
        self.m_j = np.zeros(self.R, np.int64)  # candidate's round
        self.m_l = np.zeros(self.R, np.int64)  # reference arm's round
        # candidate arm; == ell: every cheaper arm eliminated (play ell); -1: accepted (play last)
        self.ep = np.zeros(self.R, np.int64) if self.ell > 0 else np.full(self.R, self.ell, np.int64)

    def settled(self) -> np.ndarray:
        return (self.ep == self.ell) | (self.ep == -1)

    def select(self, t: int) -> np.ndarray:
        ell, a = self.ell, 1.0 - self.alpha
        arms = np.where(self.ep == -1, self.last, ell)
        act = np.flatnonzero((self.ep != -1) & (self.ep != ell))
        if not act.size:
            return arms
        j, Dj, Dl = self.ep[act], 2.0 ** -self.m_j[act], 2.0 ** -self.m_l[act]
        fill_j = self.n[act, j] < sample_size(Dj, self.T)
        fill_l = ~fill_j & (self.n[act, ell] < sample_size(Dl, self.T))
        arms[act] = np.where(fill_j, j, ell)
        test = ~(fill_j | fill_l)
        if test.any():
            r, jt = act[test], j[test]
            bj, bl = buffer(Dj[test], self.T), buffer(Dl[test], self.T)
            mj, ml = self.mu_hat[r, jt], a * self.mu_hat[r, ell]
            accept = ml + bl < mj - bj
            drop = ~accept & (mj + bj < ml - bl)
            more = ~(accept | drop)
            self.ep[r[accept]] = -1
            self.ep[r[drop]] = jt[drop] + 1
            self.m_j[r[drop]] = 0
            if not self.asymmetric:
                self.m_l[r[drop]] = 0
            self.m_j[r[more]] = np.minimum(self.m_j[r[more]] + 1, self.m_max)
            self.m_l[r[more]] = (np.maximum(self.m_l[r[more]], self.m_j[r[more]]) if self.asymmetric
                                 else self.m_j[r[more]])
            arms[r] = np.where(drop, jt + 1, jt)  # the test step pulls the candidate (or the next one)
        return arms


class PECS(Policy):
    """PE-CS: Improved-UCB best-arm identification, then PE against the identified best arm."""

    name = "pe_cs"
    BAI, PE, FIXED = 1, 2, 3

    def __init__(self, *args, kappa: int = 5, **kw):
        super().__init__(*args, **kw)
        if self.setting != "subsidy":
            raise ValueError("PE-CS is for the subsidised best reward setting (use PE with a known ell)")
        self.kappa, self.m_max = int(kappa), max_round(self.T)
        self.omega = np.zeros((self.R, self.K), np.int64)  # each arm's round
        self.active = np.ones((self.R, self.K), bool)
        self.phase = np.full(self.R, self.BAI, np.int64)
        self.ep = np.zeros(self.R, np.int64)
        self.ell_hat = np.zeros(self.R, np.int64)

    def settled(self) -> np.ndarray:
        return self.phase == self.FIXED

    def select(self, t: int) -> np.ndarray:
        arms = np.full(self.R, -1, np.int64)
        while True:
            fixed = self.phase == self.FIXED
            arms[fixed] = self.last[fixed]
            self._bai(np.flatnonzero((self.phase == self.BAI) & (arms < 0)), arms)
            self._pe(np.flatnonzero((self.phase == self.PE) & (arms < 0)), arms)
            if (arms >= 0).all():  # a run whose best-arm phase just ended takes its pull in phase 2
                return arms

    def _bai(self, r: np.ndarray, arms: np.ndarray) -> None:
        if not r.size:
            return
        D = 2.0 ** -self.omega[r].max(axis=1)
        need = self.active[r] & (self.n[r] < sample_size(D, self.T)[:, None])
        filling = need.any(axis=1)
        arms[r[filling]] = need[filling].argmax(axis=1)  # fill the active arms in index order
        c = ~filling
        if not c.any():
            return
        rc, B = r[c], buffer(D[c], self.T)[:, None]
        mh, act = self.mu_hat[rc], self.active[rc]
        best_lcb = np.where(act, mh - B, -np.inf).max(axis=1, keepdims=True)
        keep = act & (mh + B > best_lcb)
        self.active[rc] = keep
        single = keep.sum(axis=1) == 1
        many = rc[~single]
        self.omega[many] = np.where(keep[~single], np.minimum(self.omega[many] + 1, self.m_max), self.omega[many])
        arms[many] = keep[~single].argmax(axis=1)  # the elimination step pulls the first survivor
        done = rc[single]  # best arm found: no pull now, phase 2 decides this step's arm
        self.ell_hat[done] = keep[single].argmax(axis=1)
        self.phase[done] = self.PE
        self.ep[done] = 0
        cheapest_best = done[self.ell_hat[done] == 0]
        self.phase[cheapest_best] = self.FIXED
        self.last[cheapest_best] = 0

    def _pe(self, r: np.ndarray, arms: np.ndarray) -> None:
        if not r.size:
            return
        a = 1.0 - self.alpha
        e, el = self.ep[r], self.ell_hat[r]
        m_e = self.omega[r, e]
        m_l = np.minimum(self.omega[r, el], m_e + self.kappa)
        De, Dl = 2.0 ** -m_e, 2.0 ** -m_l
        fill_e = self.n[r, e] < sample_size(De, self.T)
        fill_l = ~fill_e & (self.n[r, el] < sample_size(Dl, self.T))
        arms[r] = np.where(fill_e, e, el)
        test = ~(fill_e | fill_l)
        if not test.any():
            return
        rt, et, lt = r[test], e[test], el[test]
        be, bl = buffer(De[test], self.T), buffer(Dl[test], self.T)
        me, ml = self.mu_hat[rt, et], self.mu_hat[rt, lt]
        accept = a * (ml + bl) < me - be
        drop = ~accept & (me + be < a * (ml - bl))
        more = ~(accept | drop)
        self.phase[rt[accept]] = self.FIXED
        self.last[rt[accept]] = et[accept]
        nxt = et + 1
        self.ep[rt[drop]] = nxt[drop]
        on_ref = drop & (nxt == lt)
        self.phase[rt[on_ref]] = self.FIXED
        self.last[rt[on_ref]] = lt[on_ref]
        rm, em, lm = rt[more], et[more], lt[more]
        self.omega[rm, em] = np.minimum(self.omega[rm, em] + 1, self.m_max)
        self.omega[rm, lm] = np.maximum(self.omega[rm, lm], self.omega[rm, em])
        arms[rt] = np.where(drop, nxt, et)


class IndexPolicy(Policy):
    """The MAB-CS baselines: pull each arm once, then the cheapest arm whose index is at least
    (1 - alpha) times the reference index (the largest index, or ell's with a known reference);
    equal-cost candidates are chosen uniformly."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        # with a known reference arm, arms dearer than ell can never be the target: they are not played
        self.K_play = int((self.cost <= self.cost[self.ell]).sum()) if self.setting == "known_ref" else self.K

    @abstractmethod
    def index(self, t: int) -> np.ndarray:
        """Each run's index of each arm at step t."""

    def reference(self, idx: np.ndarray) -> np.ndarray:
        return idx.max(axis=1) if self.setting == "subsidy" else idx[:, self.ell]

    def select(self, t: int) -> np.ndarray:
        if t <= self.K_play:
            return np.full(self.R, t - 1, np.int64)
        idx = self.index(t)
        return self.cheapest(idx >= (1.0 - self.alpha) * self.reference(idx)[:, None], t)

    def cheapest(self, feasible: np.ndarray, t: int) -> np.ndarray:
        feasible[:, self.K_play:] = False
        cmin = np.where(feasible, self.cost, np.inf).min(axis=1, keepdims=True)
        cand = feasible & (self.cost == cmin)
        count = cand.sum(axis=1)
        if (count == 1).all():
            return cand.argmax(axis=1)
        pick = np.floor(uniforms(self.keys, t, TIE) * count).astype(np.int64)
        return (cand & (np.cumsum(cand, axis=1) == (pick + 1)[:, None])).argmax(axis=1)

    def ucb_width(self) -> np.ndarray:
        return np.sqrt(2.0 * math.log(self.T) / np.maximum(self.n, 1))


class CSUCB(IndexPolicy):
    """CS-UCB: index min(mu_hat + sqrt(2 ln T / n), 1)."""

    name = "cs_ucb"

    def index(self, t: int) -> np.ndarray:
        return np.minimum(self.mu_hat + self.ucb_width(), 1.0)


class CSTS(IndexPolicy):
    """CS-TS: Thompson samples from Beta(successes + 1, failures + 1), by inverting the Beta CDF at
    the counter-based uniforms; a reward in [0, 1] that is not 0 or 1 counts as a success with
    probability equal to it (Agrawal & Goyal)."""

    name = "cs_ts"

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.wins = np.zeros((self.R, self.K))
        self.streams = np.broadcast_to(THETA + np.arange(self.K), (self.R, self.K))

    def index(self, t: int) -> np.ndarray:
        return betaincinv(self.wins + 1.0, self.n - self.wins + 1.0, uniforms(self.keys, t, self.streams))

    def update(self, t: int, arms: np.ndarray, rewards: np.ndarray) -> None:
        super().update(t, arms, rewards)
        if self.reward_model != "bernoulli":
            rewards = (uniforms(self.keys, t, BINARISE) < rewards).astype(np.float64)
        self.wins[self.rows, arms] += rewards


class CSETC(IndexPolicy):
    """CS-ETC: tau = factor * ceil((T/K)^(2/3)) pulls of every arm in turn, then the cheapest arm
    whose upper bound reaches (1 - alpha) times the reference lower bound (the largest lower bound,
    or ell's), recomputed every step."""

    name = "cs_etc"

    def __init__(self, *args, factor: float = 5.0, **kw):
        super().__init__(*args, **kw)
        self.tau = etc_tau(self.T, self.K_play, factor)

    def index(self, t: int) -> np.ndarray:
        return np.minimum(self.mu_hat + self.ucb_width(), 1.0)

    def select(self, t: int) -> np.ndarray:
        if t <= self.K_play * self.tau:
            return np.full(self.R, (t - 1) % self.K_play, np.int64)
        mh, w = self.mu_hat, self.ucb_width()
        upper, lower = np.minimum(mh + w, 1.0), np.maximum(mh - w, 0.0)
        ref = lower.max(axis=1) if self.setting == "subsidy" else lower[:, self.ell]
        return self.cheapest(upper >= (1.0 - self.alpha) * ref[:, None], t)


POLICIES = {"pe": PairwiseElimination, "pe_asym": PairwiseElimination, "pe_cs": PECS,
            "cs_ucb": CSUCB, "cs_ts": CSTS, "cs_etc": CSETC}
SETTINGS = {"pe": ("known_ref",), "pe_asym": ("known_ref",), "pe_cs": ("subsidy",),
            "cs_ucb": ("known_ref", "subsidy"), "cs_ts": ("known_ref", "subsidy"), "cs_etc": ("known_ref", "subsidy")}


def make_policy(name: str, cost, T: int, keys, alpha: float, setting: Setting, ell: int | None = None,
                reward_model: RewardModel = "bernoulli", kappa: int = 5, etc_factor: float = 5.0) -> Policy:
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
    if setting not in SETTINGS[name]:
        raise ValueError(f"policy {name} does not run in the {setting} setting")
    kw: dict = {"setting": setting, "ell": ell, "reward_model": reward_model}
    if name == "pe_asym":
        kw["asymmetric"] = True
    elif name == "pe_cs":
        kw["kappa"] = kappa
    elif name == "cs_etc":
        kw["factor"] = etc_factor
    return POLICIES[name](cost, T, keys, alpha, **kw)
