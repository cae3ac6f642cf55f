"""Study 15: Beyond Worst-Case Dimensionality Reduction for Sparse Vectors (Silwal, Woodruff, Zhang; ICLR 2025)."""
