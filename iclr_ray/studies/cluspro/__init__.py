"""ClusPro (Qu et al., ICLR 2025): K clustering-based prototypes per attribute and object, assigned
by balanced optimal transport and updated by EMA, with a prototype contrastive loss, on a
compositional zero-shot data set built from real handwritten digits (multimodal attributes and
the unimodal control)."""
