"""Ctrl-U: uncertainty-aware reward fine-tuning of a ControlNet."""
