"""igcg: Jia et al., Improved Techniques for Optimization-Based Jailbreaking on Large Language Models
(ICLR 2025). GCG and I-GCG's automatic multi-coordinate update with easy-to-hard initialisation,
measured on benign target strings."""
