"""Day 11, a second way: patchify with Tensor.unfold along H then W (any dtype), the conv output
rearranged by reshape + transpose, a ModuleList walked by a loop, CLS prepended with F.pad."""

# %% day11_patchify
def patchify(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    """Cut images into non-overlapping square patches.

    Args:
        images: (B, C, H, W), or (B, H, W) for one channel. H and W multiples of patch_size.
        patch_size: P, the side of each patch.

    Returns:
        (B, N, P * P * C) with N = (H / P) * (W / P): patches in row-major order, each
        flattened as (channel, row, column).

    Raises:
        ValueError: when H or W is not a multiple of patch_size.
    """
    x = images.unsqueeze(1) if images.ndim == 3 else images
    b, c, h, w = x.shape
    p = patch_size
    if h % p != 0 or w % p != 0:
        raise ValueError(f"H = {h} and W = {w} must be multiples of patch_size = {p}")
    # (B, C, H/P, W, P) -> (B, C, H/P, W/P, P_row, P_col)
    windows = x.unfold(2, p, p).unfold(3, p, p)
    windows = windows.permute(0, 2, 3, 1, 4, 5)           # (B, H/P, W/P, C, P, P)
    return windows.reshape(b, (h // p) * (w // p), c * p * p)


# %% day11_patch_embedding
class PatchEmbedding(nn.Module):
    """Linear embedding of non-overlapping patches, as a strided Conv2d.

    forward(images): (B, C, H, W) -> (B, N, d_model), N = (H / P) * (W / P), row-major.
    """

    def __init__(self, in_channels: int, patch_size: int, d_model: int) -> None:
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Conv2d(in_channels=in_channels, out_channels=d_model,
                              kernel_size=(patch_size, patch_size),
                              stride=(patch_size, patch_size))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        out = self.proj(images)
        b, d = out.shape[:2]
        return out.reshape(b, d, -1).transpose(-1, -2)   # (B, N, d_model)


# %% day11_vision_transformer
class VisionTransformer(nn.Module):
    """ViT: patch embedding, CLS token, learned positions, encoder layers, LayerNorm, head.

    forward(images): (B, in_channels, image_size, image_size) -> logits (B, num_classes).
    """

    def __init__(self, image_size: int = 28, patch_size: int = 7, in_channels: int = 1,
                 num_classes: int = 10, d_model: int = 64, num_heads: int = 4,
                 num_layers: int = 4, d_ff: int = 128) -> None:
        super().__init__()
        num_patches = (image_size // patch_size) ** 2
        self.patch_embed = PatchEmbedding(in_channels, patch_size, d_model)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.pos_embedding = nn.Parameter(
            nn.init.trunc_normal_(torch.zeros(1, num_patches + 1, d_model), std=0.02))
        self.layers = nn.ModuleList()
        for _ in range(num_layers):
            self.layers.append(TransformerEncoderLayer(d_model, num_heads, d_ff))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, num_classes)
        nn.init.trunc_normal_(self.head.weight, std=0.02)
        nn.init.zeros_(self.head.bias)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(images)
        x = F.pad(x, (0, 0, 1, 0))                 # an empty slot at position 0: (B, N + 1, D)
        slot = torch.zeros_like(self.pos_embedding[:, :, :1])   # (1, N + 1, 1)
        slot[:, 0] = 1.0                                        # 1 at position 0 only
        x = x + slot * self.cls_token + self.pos_embedding
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x)[:, 0, :])
