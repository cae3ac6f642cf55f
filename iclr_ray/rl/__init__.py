"""Shared by the RL studies: RLlib pieces (online numpy policies on env runners, ...)."""
