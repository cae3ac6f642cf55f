"""pad: Chen, Zhang, Luo, Chai, Liu. PAD: Personalized Alignment of LLMs at Decoding-time. ICLR 2025."""
