"""MAE baseline: random patch masking with a timm ViT encoder and mask tokens in the decoder.

Masked autoencoders (He et al., "Masked Autoencoders Are Scalable Vision Learners", arXiv:2111.06377, Sec. 3):
keep a random ``1 - mask_ratio`` of the patches (75% masked by default), encode only those with the ViT, fill
the hidden positions with a shared learned mask token in the decoder, decode every patch to pixels and take the
mean squared error on the per-patch normalised pixels of the masked patches.

Layouts: images ``(B, 3, H, W)`` NCHW; tokens ``(B, N, D)`` in raster order of the ``H/p x W/p`` patch grid.
The decoder is :class:`~pdevision.layers.decoder.TokenDecoder`, the same module (and size) that QB-Heat uses.
"""

from __future__ import annotations

from typing import Any

import torch
from timm.layers import trunc_normal_
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from pdevision.layers.decoder import TokenDecoder, reconstruction_loss, to_pixels
from pdevision.models.factory import create_model

# ~1.8M parameters: the size of vheat_micro (1.87M)
DEFAULT_MAE_MODEL = "vit_tiny_patch16_224"
DEFAULT_MAE_ARGS: dict[str, Any] = {"patch_size": 8, "depth": 4, "global_pool": "avg"}


class MAE(nn.Module):
    """Masked autoencoder (arXiv:2111.06377) over a timm :class:`VisionTransformer`.

    Args:
        encoder: a registered ViT name (built without classifier at ``img_size``) or a ``VisionTransformer``.
        img_size: image side in pixels (a multiple of the patch size).
        mask_ratio: fraction of patches hidden from the encoder (0.75).
        decoder_width: width of the :class:`TokenDecoder`.
        decoder_depth: blocks of the :class:`TokenDecoder`.
        decoder_heads: attention heads of the :class:`TokenDecoder`.
        loss_region: ``"unseen"`` (masked patches, as in MAE) or ``"all"``.
        norm_pix: per-patch normalised pixel targets.
        encoder_args: extra arguments for building ``encoder`` by name.
    """

    def __init__(
        self,
        encoder: str | nn.Module = DEFAULT_MAE_MODEL,
        img_size: int = 64,
        mask_ratio: float = 0.75,
        decoder_width: int = 128,
        decoder_depth: int = 2,
        decoder_heads: int = 4,
        loss_region: str = "unseen",
        norm_pix: bool = True,
        encoder_args: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if not 0.0 < mask_ratio < 1.0:
            raise ValueError(f"mask ratio must be between 0 and 1 (exclusive), got {mask_ratio}")
        if loss_region not in ("unseen", "all"):
            raise ValueError(f"loss region must be 'unseen' or 'all', got {loss_region!r}")
        self.encoder_name = encoder if isinstance(encoder, str) else type(encoder).__name__
        self.encoder_args = dict(encoder_args or {})
        if isinstance(encoder, str):
            encoder = create_model(encoder, num_classes=0, img_size=img_size, **self.encoder_args)
        if not isinstance(encoder, VisionTransformer):
            raise ValueError(
                f"MAE needs a timm VisionTransformer encoder (e.g. {DEFAULT_MAE_MODEL}), got {self.encoder_name!r}"
            )
        patch = int(encoder.patch_embed.patch_size[0])
        if img_size % patch:
            raise ValueError(f"image size {img_size} must be a multiple of the patch size {patch}")
        self.encoder, self.img_size, self.patch = encoder, img_size, patch
        self.grid = (img_size // patch, img_size // patch)
        self.mask_ratio, self.loss_region, self.norm_pix = mask_ratio, loss_region, norm_pix
        self.decoder = TokenDecoder(encoder.embed_dim, patch, decoder_width, decoder_depth, decoder_heads)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, decoder_width))
        trunc_normal_(self.mask_token, std=0.02)

    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        inner = self.encoder.no_weight_decay() if hasattr(self.encoder, "no_weight_decay") else set()
        return {f"encoder.{k}" for k in inner} | {"mask_token"}

    def random_masking(self, batch: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Per image, the indices ``(B, n_keep)`` of the kept patches (``n_keep = int(N (1 - mask_ratio))``)
        and the hidden mask ``(B, N)`` (1: masked); uniform random order from the global torch RNG."""
        n = self.grid[0] * self.grid[1]
        n_keep = max(1, int(n * (1.0 - self.mask_ratio)))
        keep = torch.rand(batch, n, device=device).argsort(dim=1)[:, :n_keep]
        hidden = torch.ones(batch, n, device=device).scatter(1, keep, 0.0)
        return keep, hidden

    def encode(self, images: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """ViT on the kept patches only: ``(B, 3, H, W)`` and ``(B, n_keep)`` to ``(B, n_keep, D)``."""
        enc = self.encoder
        x = enc._pos_embed(enc.patch_embed(images))  # (B, prefix + N, D), positions added before dropping
        prefix = enc.num_prefix_tokens
        patches = x[:, prefix:].gather(1, keep.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
        x = torch.cat([x[:, :prefix], patches], dim=1)
        x = enc.norm(enc.blocks(enc.norm_pre(x)))
        return x[:, prefix:]

    def forward(self, images: torch.Tensor) -> dict[str, Any]:
        """``images`` ``(B, 3, H, W)`` to ``loss``, ``prediction`` (patches ``(B, N, p * p * 3)``), ``hidden``
        ``(B, N)`` and ``keep`` ``(B, n_keep)``."""
        b = images.shape[0]
        if tuple(images.shape[-2:]) != (self.img_size, self.img_size):
            raise ValueError(f"MAE was built for {self.img_size} px images, got {tuple(images.shape[-2:])}")
        keep, hidden = self.random_masking(b, images.device)
        visible = self.decoder.embed(self.encode(images, keep))
        tokens = self.mask_token.to(visible.dtype).expand(b, hidden.shape[1], -1)
        tokens = tokens.scatter(1, keep.unsqueeze(-1).expand(-1, -1, visible.shape[-1]), visible)
        prediction = self.decoder.forward_embedded(tokens, self.grid)
        weight = hidden if self.loss_region == "unseen" else None
        loss = reconstruction_loss(prediction, images, self.patch, weight, self.norm_pix)
        return {"loss": loss, "prediction": prediction, "hidden": hidden, "keep": keep}

    @torch.no_grad()
    def reconstruct(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        """For display: ``visible`` (kept patches, zeros elsewhere), ``prediction`` (predicted pixels, kept
        patches pasted in) and ``target``, all ``(B, 3, H, W)`` in the normalised input space."""
        out = self(images)
        p, (gh, gw) = self.patch, self.grid
        keep = (1 - out["hidden"]).reshape(-1, 1, gh, gw)
        keep = keep.repeat_interleave(p, dim=2).repeat_interleave(p, dim=3)
        pixels = to_pixels(out["prediction"].float(), images, p, self.norm_pix)
        return {"visible": images * keep, "prediction": pixels * (1 - keep) + images * keep, "target": images}
