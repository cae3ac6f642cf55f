"""knowledge_entropy: Kim et al. Knowledge Entropy Decay during Language Model Pretraining Hinders New
Knowledge Acquisition. ICLR 2025. (In progress: the method module; the study's run, analysis and
plots are issue 23's remaining work, and the study is not registered until they land;
docs/studies/knowledge_entropy.md says what exists.)"""
