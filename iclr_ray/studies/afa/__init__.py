"""afa: ensembling diffusion models by adaptive feature aggregation (Wang et al., ICLR 2025)."""
