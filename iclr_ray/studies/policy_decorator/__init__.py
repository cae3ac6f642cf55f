"""Study 18: Policy Decorator — Model-Agnostic Online Refinement for Large Policy Models (Yuan, Mu,
Tao, Fang, Zhang, Su; ICLR 2025)."""
