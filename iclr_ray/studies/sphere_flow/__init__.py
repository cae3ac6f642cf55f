"""Study 12: Emergence of meta-stable clustering in mean-field transformer models (Bruno,
Pasqualotto, Agazzi; ICLR 2025)."""
