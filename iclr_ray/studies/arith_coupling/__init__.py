"""Study 1 (arith_coupling): Cho, Cha, Bhojanapalli, Yun. Arithmetic Transformers Can Length-Generalize
in Both Operand Length and Count. ICLR 2025.

So far only the tasks and their position ids (``tasks.py``) are here; the study is not registered
in ``iclr_ray.studies.IMPLEMENTED`` until its model, training and run land.
"""
