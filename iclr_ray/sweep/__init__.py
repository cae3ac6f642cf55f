"""Ray Tune sweeps over a study's config (`iclr-ray sweep`): search spaces from tune_spaces/*.yaml."""
