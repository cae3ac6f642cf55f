"""Conditional denoisers from diffusers' parts.

:class:`Denoiser` is eps-prediction ``eps(x_t, t, context, cond)``: a ``UNet2DConditionModel``
cross-attending to a context (token embeddings learnt here at small scale; a CLIP text encoder's
states at paper scale), optionally steered by a ``ControlNetModel`` on a condition map (the
ControlNet's residuals added to the U-Net's skip and middle features, as diffusers' ControlNet
pipeline does). :func:`tiny_unet` builds a small U-Net from a config; :func:`load_unet` and
:func:`load_controlnet` load a saved or published one (a local folder, a URI in a run's storage or
an HF id); :func:`save_denoiser` and :func:`load_denoiser` write and read a whole denoiser at a
location (a local folder or a URI: :mod:`iclr_ray.storage`)."""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

NULL = 0
"""the token id of the empty caption: an all-NULL context is the unconditional branch of CFG"""
TOKENS_FILE = "tokens.safetensors"  # a denoiser's caption-token embedding, beside unet/ (llm.weights)


def tiny_unet(side: int, channels: Sequence[int] = (16, 32, 32), attention_levels: int = 1, context_dim: int = 32,
              in_channels: int = 3, head_dim: int = 8, groups: int = 8, layers_per_block: int = 1):
    """A small ``UNet2DConditionModel``: one resolution level per entry of ``channels`` (each but the
    last halves the side), cross-attention in the ``attention_levels`` lowest-resolution levels and
    the middle block, ``context_dim`` wide context tokens."""
    from diffusers import UNet2DConditionModel

    n = len(channels)
    if not 0 <= attention_levels <= n:
        raise ValueError(f"attention_levels {attention_levels} must be within 0..{n}")
    down = tuple("CrossAttnDownBlock2D" if i >= n - attention_levels else "DownBlock2D" for i in range(n))
    up = tuple("CrossAttnUpBlock2D" if i < attention_levels else "UpBlock2D" for i in range(n))
    return UNet2DConditionModel(
        sample_size=side, in_channels=in_channels, out_channels=in_channels, layers_per_block=layers_per_block,
        block_out_channels=tuple(channels), down_block_types=down, up_block_types=up,
        cross_attention_dim=context_dim, attention_head_dim=head_dim, norm_num_groups=groups,
        mid_block_type="UNetMidBlock2DCrossAttn" if attention_levels else None)


def controlnet_from_unet(unet, cond_channels: int, embedding_channels: Sequence[int] = (16,)):
    """A ControlNet initialised from ``unet``'s encoder (diffusers' ``ControlNetModel.from_unet``:
    the U-Net's down and middle blocks copied, zero convolutions out). ``embedding_channels`` sets
    the condition embedding: one stride-2 convolution per entry after the first, so (16,) keeps the
    condition at the sample's resolution (pixel space), SD's (16, 32, 96, 256) brings a 512 px map
    to its 64 px latents."""
    from diffusers import ControlNetModel

    return ControlNetModel.from_unet(unet, conditioning_channels=cond_channels,
                                     conditioning_embedding_out_channels=tuple(embedding_channels))


def load_unet(source: str, subfolder: str | None = "unet"):
    """A ``UNet2DConditionModel`` from a local folder, a URI or an HF id (SD1.5: its ``unet`` subfolder)."""
    from diffusers import UNet2DConditionModel

    from .. import storage

    return UNet2DConditionModel.from_pretrained(storage.readable(source), **({"subfolder": subfolder} if subfolder else {}))


def load_controlnet(source: str):
    """A ``ControlNetModel`` from a local folder, a URI or an HF id (the fine-tuned ControlNets)."""
    from diffusers import ControlNetModel

    from .. import storage

    return ControlNetModel.from_pretrained(storage.readable(source))


class Denoiser(nn.Module):
    """eps(x_t, t, context, cond): a conditional U-Net, a ControlNet (or none) and, for token
    captions, the token embedding that makes the context (``vocab`` ids, :data:`NULL` the empty
    one)."""

    def __init__(self, unet, controlnet=None, vocab: int = 0):
        super().__init__()
        self.unet, self.controlnet = unet, controlnet
        dim = unet.config.cross_attention_dim
        self.tokens = nn.Embedding(vocab, dim) if vocab else None

    def context(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, L) token ids -> (B, L, context_dim) context states."""
        if self.tokens is None:
            raise ValueError("this denoiser has no token embedding: pass context states")
        return self.tokens(tokens)

    def forward(self, x: torch.Tensor, t: torch.Tensor, context: torch.Tensor, cond: torch.Tensor | None = None,
                cond_scale: float = 1.0) -> torch.Tensor:
        extra = {}
        if self.controlnet is not None and cond is not None:
            down, mid = self.controlnet(x, t, encoder_hidden_states=context, controlnet_cond=cond,
                                        conditioning_scale=cond_scale, return_dict=False)
            extra = {"down_block_additional_residuals": down, "mid_block_additional_residual": mid}
        return self.unet(x, t, encoder_hidden_states=context, **extra).sample


def save_denoiser(denoiser: Denoiser, location) -> None:
    """The U-Net (and the ControlNet, if any) in diffusers' format under ``location`` (``unet/``,
    ``controlnet/``), the caption-token embedding (if any) beside them as ``tokens.safetensors``
    (:mod:`iclr_ray.llm.weights`).
    ``location``: a local folder (written in place, as a train loop's checkpoint folder) or a URI
    in the run's storage (written to a local temporary folder, then uploaded file by file)."""
    from .. import storage

    with storage.folder_for(location) as folder:
        denoiser.unet.save_pretrained(folder / "unet")
        if denoiser.controlnet is not None:
            denoiser.controlnet.save_pretrained(folder / "controlnet")
        if denoiser.tokens is not None:
            from ..llm.weights import save_weights

            save_weights(denoiser.tokens.state_dict(), str(folder / TOKENS_FILE))


def load_denoiser(location, vocab: int = 0, controlnet: str | None = None) -> Denoiser:
    """A :class:`Denoiser` saved by :func:`save_denoiser`, in eval mode: its ControlNet from
    ``controlnet`` (a folder, a URI or an HF id) when given, else the one saved beside the U-Net if
    any; its ``vocab`` token embedding from ``tokens.safetensors``. ``location``: a local folder, or a URI
    (a checkpoint in the run's storage), copied once to this node (``storage.local_copy``)."""
    from .. import storage

    folder = storage.local_copy(location)
    unet = load_unet(str(folder / "unet"), subfolder=None)
    if controlnet is None and (folder / "controlnet").is_dir():
        controlnet = str(folder / "controlnet")
    den = Denoiser(unet, load_controlnet(controlnet) if controlnet else None, vocab=vocab)
    if vocab:
        from ..llm.weights import load_weights

        den.tokens.load_state_dict(load_weights(str(folder / TOKENS_FILE)))
    return den.eval()


def freeze(module: nn.Module) -> nn.Module:
    """No gradients for ``module``'s parameters (a frozen U-Net under a trained ControlNet)."""
    for p in module.parameters():
        p.requires_grad_(False)
    return module
