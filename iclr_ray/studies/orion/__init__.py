"""orion: Variengien, Winsor. Look Before You Leap: A Universal Emergent Decomposition of Retrieval
Tasks in Language Models. ICLR 2025. Request patching with forward hooks on real pretrained LMs."""
