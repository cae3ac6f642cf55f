"""AlphaRec (Sheng et al., ICLR 2025): language representations of item titles, through an MLP and
LightGCN, trained with InfoNCE, against ID-based collaborative filtering; zero-shot recommendation."""
