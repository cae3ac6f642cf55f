"""knowledge_entropy: Kim et al. Knowledge Entropy Decay during Language Model Pretraining Hinders New
Knowledge Acquisition. ICLR 2025."""
