"""BadJudge: backdoor vulnerabilities of LLM-as-a-judge (Tong, Wang, Zhao, Chen; ICLR 2025)."""
