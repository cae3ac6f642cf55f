"""Study 8: Unveiling the Secret Recipe: A Guide for Supervised Fine-Tuning Small LLMs
(Pareja et al.; ICLR 2025)."""
