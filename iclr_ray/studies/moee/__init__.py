"""moee: Li & Zhou, Your Mixture-of-Experts LLM Is Secretly an Embedding Model For Free (ICLR 2025,
oral). HS, RW (routing weights) and MoEE (concat, sum) scored on STS, classification, clustering,
pair classification and reranking."""
