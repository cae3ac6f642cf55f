"""pad: Chen, Zhang, Luo, Chai, Liu. PAD: Personalized Alignment of LLMs at Decoding-time. ICLR 2025.
(In progress: the method modules; the study is not registered until its run, analysis and plots
land; docs/studies/pad.md says what exists.)"""
