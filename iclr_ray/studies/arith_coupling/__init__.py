"""Study 1: Arithmetic Transformers Can Length-Generalize in Both Operand Length and Count (Cho, Cha,
Bhojanapalli, Yun; ICLR 2025)."""
