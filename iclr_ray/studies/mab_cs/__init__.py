"""Study 13: Pairwise Elimination with Instance-Dependent Guarantees for Bandits with Cost Subsidy
(Juneja, Joe-Wong, Yağan; ICLR 2025)."""
