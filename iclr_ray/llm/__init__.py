"""Shared by the LLM studies: model and tokenizer loading, chat data, packing (and, as they land,
the Ray Train + DeepSpeed loop, checkpoints, generation and evaluation)."""
