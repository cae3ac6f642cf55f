"""Shared by the RL studies: RLlib pieces (online numpy policies on env runners; the residual SAC
RLModule and its config), the env registry (the slot task, ManiSkill3, Adroit), base policies and
their Ray Train behaviour cloning, rollouts, and the policy/demo file formats."""
