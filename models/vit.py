"""Vision Transformer (ViT / DeiT), stacked, for every normalization scheme.

    tokens = [cls ; patches @ W_patch + b_patch] + pos       [K, B*(N+1), d]
    blocks 1..L, each an attention step then an MLP step, wired by the scheme
    logits = final_norm(h[cls]) @ W_head + b_head            [K, B, classes]

As in ViT / DeiT: non-overlapping `patch_size` patches flattened in (channel, row, column) order (the
layout of a conv2d weight `[d, C, p, p]`), a learnable class token and learnable absolute position
embeddings, multi-head self-attention with q|k|v and output biases (no causal mask, no RoPE), a GELU
MLP with biases (hidden 4d unless `mlp_hidden` says otherwise), and **LayerNorm** (centred, with a
gain and a bias) wherever the scheme normalises: `pre` is the ViT/DeiT block
`h + B(LN(h))` with a final LayerNorm. The class token's final state feeds a linear head; `vocab` is
the number of classes.

The scheme interface is the decoder's (`models.scheme`): the family supplies a `StepOps` whose
`norm(x, site)` is LayerNorm without affine, times the site's gain, plus the block's bias for that
site. A block owns a bias (init 0) for every site its scheme normalises (found by running the scheme's
step once on a probe), and a gain for every site of `scheme.block_sites(l)`. With LayerRoPE the gains
of the norm sites come from the LayerRoPE module instead, while centring and the per-layer biases stay:

    LN_l(x) = (x - mean(x)) / sqrt(var(x) + eps) * r[l] + b_l,   r = LayerRoPE read gains

By default the ViT's LayerRoPE has only the two read sites (the pre-norm LayerNorms' gains, no write
gains on the branch outputs; scheme option `write_gains`, set by the family) and its magnitude slopes
start at 0 (`mag_slope_init`).

Drop-path (stochastic depth, `extra.drop_path`, DeiT 0.1): in training mode, each sublayer's output
is zeroed for a random subset of the images and scaled by 1/keep for the others, with the rate rising
linearly from 0 at block 1 to `drop_path` at block L; the same images are dropped in every member of
the stack (like the data, the randomness is shared), drawn from `forward(..., drop_seed=s)`'s own
generator when a seed is given (a trial gives one per step: exact resume). It acts on the sublayer's raw
output, before any output norm a scheme applies.

Initialisation (`init_weights(seed)`): one member drawn from `torch.Generator().manual_seed(seed)` in
a fixed order (patch embedding, class token, position embeddings, per block qkv, o, fc1, fc2, head),
biases 0, gains 1, copied into all K members; then the scheme's init multipliers (`fc1` plays `up`,
`fc2` plays `down`; there is no `gate`). Every drawn weight is DeiT's truncated normal by default
(`extra.init: trunc_normal`): `torch.nn.init.trunc_normal_(std=init_std, a=-init_trunc, b=init_trunc)`,
the function timm's `trunc_normal_` mirrors, with timm's absolute bounds of +-2 by default (at std 0.02
they cut nothing measurable; `init_trunc: 0.04` cuts at 2 sigma); `init: normal` draws N(0, init_std).
Unlike DeiT's code, which leaves its convolutional patch embedding at PyTorch's default uniform init
(std 0.0208 at 16 px RGB patches), the patch embedding is drawn like the other weights.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.config import ModelConfig
from models.families.vit import VIT, ViTSettings, normalised_sites, vit_hidden, vit_settings
from models.family import family_of
from models.layers import ResidualStep
from models.llama import LlamaLM
from models.registry import make_scheme
from models.scheme import BLOCK_WEIGHTS, ParamKind, Scheme
from models.stacked import StackedModel


def layer_norm(x: Tensor, eps: float) -> Tensor:
    """LayerNorm over the last dimension without affine: (x - mean) / sqrt(var + eps)."""
    return F.layer_norm(x, (x.shape[-1],), eps=eps)


# ---- sublayers -------------------------------------------------------------------------------------


class ViTAttention(nn.Module):
    """Bidirectional multi-head attention: `qkv` `[K, d, 3d]` + `qkv_bias` `[K, 3d]`, `o` `[K, d, d]` + `o_bias`."""

    def __init__(self, width: int, n_heads: int, *, stack: int) -> None:
        super().__init__()
        self.width, self.n_heads, self.head_dim = width, n_heads, width // n_heads
        self.qkv = nn.Parameter(torch.empty(stack, width, 3 * width))
        self.qkv_bias = nn.Parameter(torch.zeros(stack, 3 * width))
        self.o = nn.Parameter(torch.empty(stack, width, width))
        self.o_bias = nn.Parameter(torch.zeros(stack, width))

    def forward(self, x: Tensor, seq_len: int) -> Tensor:
        k_models, n_tokens, _ = x.shape
        batch = k_models * (n_tokens // seq_len)
        qkv = torch.baddbmm(self.qkv_bias.unsqueeze(1), x, self.qkv).view(batch, seq_len, 3, self.n_heads, self.head_dim)
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))
        y = F.scaled_dot_product_attention(q, k, v)
        y = y.transpose(1, 2).reshape(k_models, n_tokens, self.width)
        return torch.baddbmm(self.o_bias.unsqueeze(1), y, self.o)


class GeluMLP(nn.Module):
    """`fc2(gelu(fc1(x)))` with biases: `fc1` `[K, d, h]`, `fc2` `[K, h, d]` (exact erf GELU)."""

    def __init__(self, width: int, hidden: int, *, stack: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.fc1 = nn.Parameter(torch.empty(stack, width, hidden))
        self.fc1_bias = nn.Parameter(torch.zeros(stack, hidden))
        self.fc2 = nn.Parameter(torch.empty(stack, hidden, width))
        self.fc2_bias = nn.Parameter(torch.zeros(stack, width))

    def forward(self, x: Tensor) -> Tensor:
        y = F.gelu(torch.baddbmm(self.fc1_bias.unsqueeze(1), x, self.fc1))
        return torch.baddbmm(self.fc2_bias.unsqueeze(1), y, self.fc2)


class LayerNormStep(ResidualStep):
    """`models.scheme.StepOps` for one ViT sublayer: LayerNorm with gain and bias, drop-path on the
    branch. Gains, external (LayerRoPE) gains and constants are looked up as in the decoder's step."""

    __slots__ = ("_biases", "_keep")

    def __init__(
        self,
        fn: Callable[[Tensor], Tensor],
        prefix: str,
        gains: Mapping[str, Tensor],
        biases: Mapping[str, Tensor],
        external: Mapping[str, Tensor],
        consts: nn.Module,
        eps: float,
        keep: Tensor | None,
    ) -> None:
        super().__init__(fn, prefix, gains, external, consts, eps)
        self._biases, self._keep = biases, keep

    def branch(self, x: Tensor) -> Tensor:
        y = self._fn(x)
        return y if self._keep is None else y * self._keep

    def residual(self, h: Tensor, x: Tensor, *, skip: float = 1.0, scale: float = 1.0, gain: str | None = None) -> Tensor:
        y = self.branch(x)
        if gain is not None:
            y = y * self._site_gain(gain).unsqueeze(-2)
        base = h if skip == 1.0 else h * skip
        return base + y if scale == 1.0 else base + scale * y

    def norm(self, x: Tensor, site: str | None = None) -> Tensor:
        y = layer_norm(x, self._eps)
        if site is None:
            return y
        key = self._prefix + site
        y = y * self._site_gain(site).unsqueeze(-2)
        return y + self._biases[key].unsqueeze(-2) if key in self._biases else y


class ViTBlock(nn.Module):
    """Block `layer` (1-based): attention step then MLP step, each wired by the scheme."""

    def __init__(self, cfg: ModelConfig, scheme: Scheme, layer: int, stack: int, drop_rate: float) -> None:
        super().__init__()
        self.layer, self.eps, self.drop_rate = layer, cfg.norm_eps, drop_rate
        d = cfg.width
        self.attn = ViTAttention(d, cfg.n_heads, stack=stack)
        self.mlp = GeluMLP(d, vit_hidden(cfg), stack=stack)
        self.step = scheme.step_for(layer)
        self.gains = nn.ParameterDict({site: nn.Parameter(torch.ones(stack, d)) for site in scheme.block_sites(layer)})
        self.norm_bias = nn.ParameterDict(
            {site: nn.Parameter(torch.zeros(stack, d)) for site in normalised_sites(self.step)}
        )
        for name, value in scheme.constants(layer).items():
            self.register_buffer("c_" + name, torch.tensor(float(value), dtype=torch.float64), persistent=False)

    def forward(self, h: Tensor, seq_len: int, external: Mapping[str, Tensor], keep: tuple[Tensor, Tensor] | None) -> Tensor:
        keep_attn, keep_mlp = keep if keep is not None else (None, None)
        attn = LayerNormStep(lambda x: self.attn(x, seq_len), "attn_", self.gains, self.norm_bias, external, self,
                             self.eps, keep_attn)
        h = self.step(h, attn)
        mlp = LayerNormStep(self.mlp, "mlp_", self.gains, self.norm_bias, external, self, self.eps, keep_mlp)
        return self.step(h, mlp)

    def weight_view(self, name: str) -> Tensor | None:
        """The slice of a weight holding `name` (one of BLOCK_WEIGHTS); None for `gate` (no gate in a GELU MLP)."""
        d = self.attn.width
        views: dict[str, Callable[[], Tensor]] = {
            "q": lambda: self.attn.qkv[..., 0:d],
            "k": lambda: self.attn.qkv[..., d : 2 * d],
            "v": lambda: self.attn.qkv[..., 2 * d : 3 * d],
            "o": lambda: self.attn.o,
            "up": lambda: self.mlp.fc1,
            "down": lambda: self.mlp.fc2,
        }
        return views[name]() if name in views else None


class ViT(StackedModel):
    """K stacked Vision Transformers of one configuration and scheme."""

    def __init__(self, cfg: ModelConfig, *, stack: int = 1) -> None:
        super().__init__()
        if family_of(cfg) is not VIT:
            raise ValueError(f"ViT needs model.family 'vit', got {cfg.family!r}")
        self.image: ViTSettings = vit_settings(cfg)
        validate_vit_config(cfg)
        if stack < 1:
            raise ValueError(f"stack must be >= 1, got {stack}")
        cfg = replace(cfg, scheme_options=VIT.scheme_options(cfg))
        self.cfg, self.stack = cfg, stack
        self.scheme = scheme = make_scheme(cfg.scheme, cfg.depth, cfg.scheme_options)
        d, img = cfg.width, self.image
        self.patch_embed = nn.Parameter(torch.empty(stack, img.patch_dim, d))
        self.patch_bias = nn.Parameter(torch.zeros(stack, d))
        self.cls_token = nn.Parameter(torch.empty(stack, d))
        self.pos_embed = nn.Parameter(torch.empty(stack, img.tokens, d))
        self.embed_gain = nn.Parameter(torch.ones(stack, d)) if scheme.embed_norm else None
        self.embed_bias = nn.Parameter(torch.zeros(stack, d)) if scheme.embed_norm else None
        rates = [img.drop_path * i / max(1, cfg.depth - 1) for i in range(cfg.depth)]
        self.blocks = nn.ModuleList(ViTBlock(cfg, scheme, layer, stack, rates[layer - 1]) for layer in range(1, cfg.depth + 1))
        self.site_gains = scheme.make_site_gains(cfg, stack)
        self.final_gain = nn.Parameter(torch.ones(stack, d)) if scheme.final_norm else None
        self.final_bias = nn.Parameter(torch.zeros(stack, d)) if scheme.final_norm else None
        self.head = nn.Parameter(torch.empty(stack, d, cfg.vocab))
        self.head_bias = nn.Parameter(torch.zeros(stack, cfg.vocab))

    # ---- init -------------------------------------------------------------------------------------
    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        std, image = self.cfg.init_std, self.image

        def draw(param: Tensor) -> None:
            base = torch.empty(param.shape[1:], dtype=torch.float32)
            if image.init == "trunc_normal":
                nn.init.trunc_normal_(base, 0.0, std, -image.init_trunc, image.init_trunc, generator=generator)
            else:
                base.normal_(0.0, std, generator=generator)
            param.copy_(base)

        for param in (self.patch_embed, self.cls_token, self.pos_embed):
            draw(param)
        for block in self.blocks:
            for param in (block.attn.qkv, block.attn.o, block.mlp.fc1, block.mlp.fc2):
                draw(param)
        draw(self.head)
        for block in self.blocks:
            for name in BLOCK_WEIGHTS:
                factor = self.scheme.init_scale(name, block.layer)
                view = block.weight_view(name)
                if factor != 1.0 and view is not None:
                    view.mul_(factor)

    # ---- forward ------------------------------------------------------------------------------------
    def patchify(self, images: Tensor) -> Tensor:
        """`[B, C, H, W]` -> `[B, N, C*p*p]` (patches in row-major order, each flattened as (C, p, p))."""
        img = self.image
        batch, channels, height, width = images.shape
        if (channels, height, width) != (img.channels, img.image_size, img.image_size):
            raise ValueError(
                f"images of shape {tuple(images.shape[1:])}, expected ({img.channels}, {img.image_size}, {img.image_size})"
            )
        p, n = img.patch_size, img.image_size // img.patch_size
        x = images.view(batch, channels, n, p, n, p).permute(0, 2, 4, 1, 3, 5)
        return x.reshape(batch, n * n, img.patch_dim)

    def forward(self, images: Tensor, drop_seed: int | None = None) -> Tensor:
        """Logits `[K, B, classes]` for images `[B, C, H, W]` (the same batch for every member).

        `drop_seed`: draw the drop-path decisions from a generator with this seed (a trial passes one per
        step, so that a resumed trial drops exactly the same images); None: from torch's global RNG."""
        return self.logits_from(self.final_hidden(images, drop_seed))

    def final_hidden(self, images: Tensor, drop_seed: int | None = None) -> Tensor:
        """The class token's normalised final state, `[K, B, d]`."""
        batch = images.shape[0]
        k, d, tokens = self.stack, self.cfg.width, self.image.tokens
        patches = self.patchify(images).to(self.patch_embed.dtype).reshape(1, -1, self.image.patch_dim)
        x = torch.baddbmm(self.patch_bias.unsqueeze(1), patches.expand(k, -1, -1), self.patch_embed)
        cls = self.cls_token.view(k, 1, 1, d).expand(k, batch, 1, d)
        h = torch.cat((cls, x.view(k, batch, tokens - 1, d)), dim=2) + self.pos_embed.unsqueeze(1)
        h = h.reshape(k, batch * tokens, d)
        if self.embed_gain is not None and self.embed_bias is not None:
            h = layer_norm(h, self.cfg.norm_eps) * self.embed_gain.unsqueeze(1) + self.embed_bias.unsqueeze(1)
        external = self.site_gains() if self.site_gains is not None else {}
        generator = torch.Generator().manual_seed(drop_seed) if drop_seed is not None and self.training else None
        for block in self.blocks:
            rows = {site: g[:, block.layer - 1] for site, g in external.items()}
            h = block(h, tokens, rows, self._keep_masks(block, batch, tokens, h, generator))
        cls_out = h.view(k, batch, tokens, d)[:, :, 0]
        if self.final_gain is not None and self.final_bias is not None:
            cls_out = layer_norm(cls_out, self.cfg.norm_eps) * self.final_gain.unsqueeze(1) + self.final_bias.unsqueeze(1)
        return cls_out

    def logits_from(self, hidden: Tensor) -> Tensor:
        return torch.baddbmm(self.head_bias.unsqueeze(1), hidden, self.head)

    def _keep_masks(self, block: ViTBlock, batch: int, tokens: int, like: Tensor,
                    generator: torch.Generator | None = None) -> tuple[Tensor, Tensor] | None:
        """Drop-path multipliers `[1, B*tokens, 1]` (0, or 1/keep) for the two sublayers, shared by the members."""
        if not self.training or block.drop_rate <= 0.0:
            return None
        keep = 1.0 - block.drop_rate
        if generator is not None:  # drawn on the CPU: the same decisions on every device
            draws = torch.rand(2, batch, generator=generator).to(like.device)
        else:
            draws = torch.rand(2, batch, device=like.device)
        masks = (draws < keep).to(like.dtype) / keep
        per_token = masks.repeat_interleave(tokens, dim=1).view(2, 1, batch * tokens, 1)
        return per_token[0], per_token[1]

    def member_losses(self, images: Tensor, targets: Tensor, label_smoothing: float = 0.0, *,
                      drop_seed: int | None = None) -> Tensor:
        """Mean cross-entropy per member `[K]` (fp32). `targets`: class ids `[B]`, or class probabilities
        `[B, classes]` (mixup / cutmix). Train on `.sum()` (each member's gradient is then its own)."""
        logits = self(images, drop_seed).float()  # [K, B, C]
        k, batch, classes = logits.shape
        flat = logits.reshape(k * batch, classes)
        if targets.dim() == 1:
            expanded = targets.reshape(1, -1).expand(k, -1).reshape(-1)
        else:
            expanded = targets.float().unsqueeze(0).expand(k, -1, -1).reshape(k * batch, classes)
        losses = F.cross_entropy(flat, expanded, reduction="none", label_smoothing=label_smoothing)
        return losses.view(k, batch).mean(dim=1)

    # ---- introspection -------------------------------------------------------------------------------
    def param_kind(self, name: str) -> ParamKind:
        if name == "patch_embed":
            return "embedding"
        if name == "head":
            return "head"
        if name.endswith(("attn.qkv", "attn.o", "mlp.fc1", "mlp.fc2")):
            return "hidden"
        if name.startswith("site_gains.") and not name.endswith(".gamma"):
            return "scalar"
        return "gain"  # gains, biases, class token, position embeddings: no weight decay (DeiT)

    @torch.no_grad()
    def layer_gains(self) -> dict[str, Tensor]:
        """Effective per-layer norm gains `[K, L, d]` by site (the decoder's definition; biases not included)."""
        return LlamaLM.layer_gains(self)  # type: ignore[arg-type]  # same attributes: blocks, gains, scheme, site_gains


def validate_vit_config(cfg: ModelConfig) -> None:
    """ValueError with a one-line message for a configuration the ViT cannot build."""
    problems = []
    if cfg.width < 2 or cfg.n_heads < 1 or cfg.width % cfg.n_heads:
        problems.append(f"width ({cfg.width}) must be a multiple of n_heads ({cfg.n_heads})")
    if cfg.depth < 1:
        problems.append(f"depth must be >= 1, got {cfg.depth}")
    if cfg.vocab < 2:
        problems.append(f"vocab (the number of classes) must be >= 2, got {cfg.vocab}")
    if vit_hidden(cfg) < 1:
        problems.append(f"mlp_hidden must be >= 1, got {cfg.mlp_hidden}")
    if not cfg.init_std > 0 or not cfg.norm_eps > 0:
        problems.append("init_std and norm_eps must be > 0")
    if problems:
        raise ValueError("model config: " + "; ".join(problems))

