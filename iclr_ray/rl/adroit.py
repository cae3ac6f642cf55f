"""A scripted planner for gymnasium-robotics' Adroit door (``AdroitHandDoor-v1``): the
demonstrations of the ``small`` Adroit task, recorded here since the D4RL/Minari human demos
cannot be downloaded. Like ManiSkill's motion-planning solutions it reads the true simulator
state (``env.unwrapped``'s MuJoCo model and data). numpy + MuJoCo, no Ray, no I/O.

How it opens the door (env steps of a 200-step episode):

1. 0-33: rise and move above the handle, fingers pre-bent (MCP 1.4), thumb tucked, palm down;
2. 33-45: descend so the fingers drop into the gap between the handle bar and the door;
3. 45-52: curl PIP/DIP to hook the bar;
4. 52-72: turn the latch to 1.45 rad, the hand held fixed in the latch's frame (the target leads
   the measured latch angle by at most 0.35 rad), pushing along the handle's arc;
5. 72-130: pull along the handle's arc as the door opens (ease-in, so the door keeps speed),
   only the finger axis kept parallel to the bar;
6. once the door passes 0.9 rad: let go (the arm's yaw limit ends its reach near 1.25 rad; the
   door's momentum carries it past the 1.35 rad of success) and go round the door's free edge to
   push its back face.

Each step's arm and wrist targets come from damped-least-squares inverse kinematics of the grasp
site on a scratch ``MjData``. The position servos are not unit gain (force = gain * ctrl -
k * q), so the action is the control that holds the target against gravity (``qfrc_bias``), plus
a PD term on the arm that removes the built-in servo's ~10-step lag and a feed-forward force
along the arc. Measured on seeds 0..49: 0.96 success without noise (seeds 4 and 41 fail: the
fast latch turn loses the bar), 0.66 with N(0, 0.1^2) action noise, 0.26 with 0.2.
"""
from __future__ import annotations

import mujoco
import numpy as np

ARM = np.arange(6)
"""ARTz, ARRx, ARRy, ARRz, WRJ1, WRJ0: qpos / dof / actuator 0..5"""
THUMB_TUCKED = [-1.0, 1.3, -0.26, -0.52, 0.0]
"""THJ4..THJ0"""


def _smooth(s: float) -> float:
    s = float(np.clip(s, 0.0, 1.0))
    return s * s * (3.0 - 2.0 * s)


def _rot_err(r_des: np.ndarray, r_cur: np.ndarray) -> np.ndarray:
    """The rotation vector (world frame) that takes r_cur to r_des."""
    q, v = np.zeros(4), np.zeros(3)
    mujoco.mju_mat2Quat(q, (r_des @ r_cur.T).ravel())
    mujoco.mju_quat2Vel(v, q, 1.0)
    return v


class DoorPlanner:
    """``planner(obs, env)`` for :func:`iclr_ray.rl.rollouts.record_demos`: the action in
    [-1, 1]^28 for the raw env. It keeps the episode's phase (its step count and whether it let
    go) and starts over when the simulation time goes back (a reset)."""

    GRASP_OFF = np.array([-0.01, 0.0, -0.02])
    """grasp-site target relative to the handle site (latch frame at rest, world axes)"""
    ABOVE = 0.12
    """pre-grasp height above the handle (m)"""
    LATCH_GOAL, DOOR_GOAL, REL_DOOR = 1.45, 1.40, 0.9
    """rad: latch turned to; door angle the pull aims at; door angle at which the hand lets go"""
    T_UP, T_OVER, T_DOWN, T_CLOSE, T_LATCH, T_PULL = 18, 33, 45, 52, 72, 130
    F_LATCH = F_PULL = 40.0
    """N, feed-forward force along the latch's and the door's arc"""
    W_PULL0, W_PULL1 = 0.3, 0.05
    """orientation weight of the IK at the start and the end of the pull"""
    T_WP = 8
    """steps per waypoint round the door's edge"""
    Z_OFF = -0.05
    WP_XY = [(-0.50, -0.30), (-0.90, -0.20), (-0.90, 0.20), (-0.45, 0.15)]
    """waypoints round the free edge, in the door's frame (m)"""
    PUSH_XY, PUSH_LEAD = (-0.40, 0.06), 0.35
    DT = 0.01
    """env step: frame_skip 5 x 0.002 s"""
    KP = np.array([600.0, 600.0, 600.0, 0.0, 0.0, 0.0])
    KD = np.array([60.0, 60.0, 60.0, 0.0, 0.0, 0.0])

    def __init__(self):
        self.raw = None
        self.last_time = np.inf

    def __call__(self, obs: np.ndarray, env) -> np.ndarray:
        if env is not self.raw or env.data.time <= self.last_time:
            self.reset(env)
        self.last_time = float(env.data.time)
        return self.act()

    def reset(self, env) -> None:
        self.raw, m, d = env, env.model, env.data
        self.m, self.d, self.sd = m, d, mujoco.MjData(m)
        name = lambda kind, n: mujoco.mj_name2id(m, kind, n)  # noqa: E731
        self.sid_grasp = name(mujoco.mjtObj.mjOBJ_SITE, "S_grasp")
        self.sid_handle = name(mujoco.mjtObj.mjOBJ_SITE, "S_handle")
        self.bid_palm = name(mujoco.mjtObj.mjOBJ_BODY, "palm")
        self.bid_latch = name(mujoco.mjtObj.mjOBJ_BODY, "latch")
        self.jid_door = name(mujoco.mjtObj.mjOBJ_JOINT, "door_hinge")
        self.q_door = m.jnt_qposadr[self.jid_door]
        self.q_latch = m.jnt_qposadr[name(mujoco.mjtObj.mjOBJ_JOINT, "latch")]
        self.lo, self.hi = m.jnt_range[:28, 0].copy(), m.jnt_range[:28, 1].copy()
        self.gain, self.kbias = m.actuator_gainprm[:, 0].copy(), -m.actuator_biasprm[:, 1].copy()
        self.cr = m.actuator_ctrlrange.copy()
        self.act_mean, self.act_rng = self.cr.mean(axis=1), 0.5 * (self.cr[:, 1] - self.cr[:, 0])
        self.t, self.released, self.open_hand, self.q_prev = 0, False, False, None
        self.p_start = d.site_xpos[self.sid_grasp].copy()
        self.r_palm0 = d.xmat[self.bid_palm].reshape(3, 3).copy()
        self.q_arm = d.qpos[ARM].copy()
        _, r_latch0 = self._handle_pose(0.0, 0.0)
        zh = d.xanchor[self.jid_door][2] + self.Z_OFF
        self.waypoints = [np.array([x, y, zh]) for x, y in self.WP_XY]
        self.push_pt = np.array([*self.PUSH_XY, zh])
        self.r_rel = r_latch0.T @ self.r_palm0
        self.off_local = r_latch0.T @ self.GRASP_OFF

    def _handle_pose(self, door: float, latch: float):
        sd = self.sd
        sd.qpos[:] = self.d.qpos
        sd.qpos[self.q_door], sd.qpos[self.q_latch] = door, latch
        mujoco.mj_kinematics(self.m, sd)
        return sd.site_xpos[self.sid_handle].copy(), sd.xmat[self.bid_latch].reshape(3, 3).copy()

    def _door_to_world(self, p: np.ndarray, door: float) -> np.ndarray:
        h = self.d.xanchor[self.jid_door]
        c, s = np.cos(door), np.sin(door)
        return np.array([h[0] + c * p[0] - s * p[1], h[1] + s * p[0] + c * p[1], p[2]])

    def _world_to_door(self, p: np.ndarray, door: float) -> np.ndarray:
        h = self.d.xanchor[self.jid_door]
        c, s = np.cos(door), np.sin(door)
        dx, dy = p[0] - h[0], p[1] - h[1]
        return np.array([c * dx + s * dy, -s * dx + c * dy, p[2]])

    def _attached(self, door: float, latch: float):
        """The grasp pose that moves with the handle at these door and latch angles."""
        hp, r_latch = self._handle_pose(door, latch)
        return hp + r_latch @ self.off_local, r_latch @ self.r_rel

    def _ik(self, p_des, r_des, w_rot: float, axis_only: bool, iters: int = 30) -> np.ndarray:
        m, sd = self.m, self.sd
        sd.qpos[:] = self.d.qpos
        q = self.q_arm.copy()
        jp, jr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
        for _ in range(iters):
            sd.qpos[ARM] = q
            mujoco.mj_kinematics(m, sd)
            mujoco.mj_comPos(m, sd)
            ep = p_des - sd.site_xpos[self.sid_grasp]
            rc = sd.xmat[self.bid_palm].reshape(3, 3)
            if axis_only:  # align the palm's x axis (the fingers' flexion axis) only
                a = rc[:, 0]
                er, proj = np.cross(a, r_des[:, 0]), np.eye(3) - np.outer(a, a)
            else:
                er, proj = _rot_err(r_des, rc), np.eye(3)
            if np.linalg.norm(ep) < 1e-4 and np.linalg.norm(er) < 1e-3:
                break
            mujoco.mj_jacSite(m, sd, jp, jr, self.sid_grasp)
            jac = np.vstack([jp[:, ARM], w_rot * (proj @ jr[:, ARM])])
            dq = jac.T @ np.linalg.solve(jac @ jac.T + 1e-3 * np.eye(6), np.concatenate([ep, w_rot * er]))
            n = np.linalg.norm(dq)
            q = np.clip(q + (dq * 0.2 / n if n > 0.2 else dq), self.lo[ARM], self.hi[ARM])
        self.q_arm = q
        return q

    def _fingers(self, close: float) -> np.ndarray:
        """Targets of joints 6..27: a hook (MCP ~90 degrees, PIP/DIP curled by ``close``), or a
        flat hand for pushing; the thumb tucked out of the way."""
        f = np.zeros(22)
        if not self.open_hand:
            for i in (0, 4, 8, 13):  # FFJ3, MFJ3, RFJ3, LFJ3 (abduction stays 0)
                f[i + 1], f[i + 2], f[i + 3] = 1.4, 0.2 + 1.0 * close, 0.2 + 0.6 * close
        f[17:22] = THUMB_TUCKED
        return f

    def _target(self, t: int, door: float, latch: float):
        """(grasp-site position, palm orientation, finger close, IK weight, axis only, wrench)."""
        p_grasp, r_grasp = self._attached(0.0, 0.0)
        up, wrench = np.array([0.0, 0.0, self.ABOVE]), np.zeros(3)
        over = np.array([p_grasp[0], self.p_start[1], p_grasp[2] + self.ABOVE])
        if t < self.T_UP:
            s = _smooth(t / self.T_UP)
            return (1 - s) * self.p_start + s * over, self.r_palm0, 0.0, 0.3, False, wrench
        if t < self.T_OVER:
            s = _smooth((t - self.T_UP) / (self.T_OVER - self.T_UP))
            return (1 - s) * over + s * (p_grasp + up), r_grasp, 0.0, 0.3, False, wrench
        if t < self.T_DOWN:
            s = _smooth((t - self.T_OVER) / (self.T_DOWN - self.T_OVER))
            return p_grasp + (1 - s) * up, r_grasp, 0.0, 0.3, False, wrench
        if t < self.T_CLOSE:
            return p_grasp, r_grasp, _smooth((t - self.T_DOWN) / (self.T_CLOSE - self.T_DOWN)), 0.3, False, wrench
        if t < self.T_LATCH:
            s = _smooth((t - self.T_CLOSE) / (self.T_LATCH - self.T_CLOSE))
            th = max(min(s * self.LATCH_GOAL, latch + 0.35), min(latch, 1.8))  # lead the latch, never lag it
            p, r = self._attached(0.0, th)
            ahead, _ = self._attached(0.0, th + 0.05)
            return p, r, 1.0, 0.3, False, self.F_LATCH * (ahead - p) / (np.linalg.norm(ahead - p) + 1e-9)
        s = np.clip((t - self.T_LATCH) / (self.T_PULL - self.T_LATCH), 0.0, 1.0)
        ph = self.DOOR_GOAL * (s * s if s < 0.5 else 0.25 + (s - 0.5)) / 0.75
        lat = float(np.clip(latch, 1.2, 1.75))
        p, r = self._attached(ph, lat)
        ahead, _ = self._attached(ph + 0.05, lat)
        w_rot = self.W_PULL0 + (self.W_PULL1 - self.W_PULL0) * _smooth((ph - 0.6) / 0.6)
        return p, r, 1.0, w_rot, True, self.F_PULL * (ahead - p) / (np.linalg.norm(ahead - p) + 1e-9)

    def _round_the_edge(self, door: float):
        tr = self.t - 1 - self.t_rel
        k = min(int(tr // self.T_WP), len(self.waypoints) - 1)
        s = _smooth((tr - k * self.T_WP) / self.T_WP)
        a = self.p_rel_door if k == 0 else self.waypoints[k - 1]
        p = (1 - s) * a + s * self.waypoints[k]
        angle = door
        if tr >= self.T_WP * len(self.waypoints):  # pushing the back face: lead the door angle
            angle, p = door + self.PUSH_LEAD, self.push_pt
        return self._door_to_world(p, angle)

    def act(self) -> np.ndarray:
        t, d = self.t, self.d
        self.t += 1
        door, latch = float(d.qpos[self.q_door]), float(d.qpos[self.q_latch])
        if not self.released:
            p_des, r_des, close, w_rot, axis_only, force = self._target(t, door, latch)
            if t >= self.T_LATCH and door > self.REL_DOOR:
                self.released, self.t_rel = True, t
                self.p_rel_door = self._world_to_door(d.site_xpos[self.sid_grasp].copy(), door)
        if self.released:
            self.open_hand = True
            p_des, r_des, close, w_rot, axis_only, force = self._round_the_edge(door), self.r_palm0, 0.0, 0.1, False, np.zeros(3)
        q_des = np.concatenate([self._ik(p_des, r_des, w_rot, axis_only), self._fingers(close)])
        # hold the targets against gravity, push along the arc, and PD on the arm against the lag
        tau = d.qfrc_bias[:28].copy()
        jp, jr = np.zeros((3, self.m.nv)), np.zeros((3, self.m.nv))
        mujoco.mj_jacSite(self.m, d, jp, jr, self.sid_grasp)
        tau[ARM] += jp[:, ARM].T @ force
        qd_des = np.zeros(6) if self.q_prev is None else (q_des[ARM] - self.q_prev) / self.DT
        self.q_prev = q_des[ARM].copy()
        tau[ARM] += self.KP * (q_des[ARM] - d.qpos[ARM]) + self.KD * (qd_des - d.qvel[ARM])
        ctrl = np.clip((self.kbias * q_des + tau) / self.gain, self.cr[:, 0], self.cr[:, 1])
        return np.clip((ctrl - self.act_mean) / self.act_rng, -1.0, 1.0).astype(np.float32)
