"""Study 4: Matrix Product Sketching via Coordinated Sampling (Daliri, Freire, Li, Musco; ICLR 2025)."""
