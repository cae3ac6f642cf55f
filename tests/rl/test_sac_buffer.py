"""The transition buffer behind DecoratedSAC: transitions cut from RLlib's own episode chunks, the
terminal flag only where an episode terminated (not at a time limit), the ring keeping the newest
rows, and the columns SAC's learner reads."""
import numpy as np
import pytest

pytest.importorskip("ray.rllib")
from ray.rllib.env.single_agent_episode import SingleAgentEpisode  # noqa: E402

from iclr_ray.rl.sac import TransitionBuffer  # noqa: E402


def chunk(start, t, terminated=False, truncated=False, t_started=0):
    """An episode chunk as an env runner returns it: t + 1 observations, t actions and rewards."""
    obs = [np.array([start + i, -(start + i)], np.float32) for i in range(t + 1)]
    ep = SingleAgentEpisode(observations=obs, actions=[np.array([start + i], np.float32) for i in range(t)],
                            rewards=[float(start + i) for i in range(t)], terminated=terminated, truncated=truncated,
                            t_started=t_started, len_lookback_buffer=0)
    return ep.to_numpy()


def test_transitions_pair_each_observation_with_its_successor_and_flag_only_termination():
    buf = TransitionBuffer(100)
    assert buf.add_episodes([chunk(0, 4), chunk(10, 3, terminated=True), chunk(20, 2, truncated=True)]) == 9
    a = buf.arrays
    assert len(buf) == 9
    np.testing.assert_array_equal(a["obs"][:4, 0], [0, 1, 2, 3])
    np.testing.assert_array_equal(a["new_obs"][:4, 0], [1, 2, 3, 4])  # s' of the chunk's last step is its last obs
    np.testing.assert_array_equal(a["actions"][4:7, 0], [10, 11, 12])
    np.testing.assert_array_equal(a["rewards"][7:9], [20, 21])
    # terminated: only the last transition of the terminated chunk; a truncated one bootstraps
    np.testing.assert_array_equal(np.flatnonzero(a["terminateds"][:9]), [6])
    # every stored row is a real transition: s' = s + 1 in the first coordinate, action = s
    np.testing.assert_array_equal(a["new_obs"][:9, 0] - a["obs"][:9, 0], 1)
    np.testing.assert_array_equal(a["actions"][:9, 0], a["obs"][:9, 0])


def test_the_ring_keeps_the_newest_rows_and_samples_sac_columns():
    buf = TransitionBuffer(5, seed=0)
    buf.add_episodes([chunk(0, 4)])
    buf.add_episodes([chunk(100, 3)])
    assert len(buf) == 5 and buf.added == 7
    assert sorted(buf.arrays["obs"][:, 0]) == [2, 3, 100, 101, 102]  # the two oldest were overwritten
    buf.add_episodes([chunk(200, 12)])  # longer than the ring: its newest five
    assert sorted(buf.arrays["obs"][:, 0]) == [207, 208, 209, 210, 211] and buf.added == 19
    s = buf.sample(64)
    assert set(s) == {"obs", "new_obs", "actions", "rewards", "terminateds", "n_step", "weights"}
    assert s["obs"].shape == (64, 2) and s["actions"].shape == (64, 1) and s["rewards"].shape == (64,)
    assert set(s["obs"][:, 0]) == {207, 208, 209, 210, 211}  # uniform over what is stored
    np.testing.assert_array_equal(s["rewards"], s["obs"][:, 0])
    assert (s["n_step"] == 1).all() and (s["weights"] == 1).all()
    with pytest.raises(ValueError, match="empty"):
        TransitionBuffer(3).sample(1)
