"""3D-MolT5 (Pei et al., ICLR 2025): E3FP 3D substructure tokens aligned with SELFIES atom tokens and
fused into a T5's encoder input, against 1D-only, 3D-only and a shuffled-conformer control on QM9."""
