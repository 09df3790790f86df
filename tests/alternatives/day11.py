"""Day 11 written another way: patches gathered by a Python loop over the grid, the conv output
moved channels-last with permute + flatten, the layers as an nn.Sequential, position vectors added
to CLS and patches separately, and the LayerNorm applied to the CLS state only."""

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
    if images.dim() == 3:                       # (B, H, W): one channel
        images = images[:, None]
    height, width = images.shape[-2:]
    side = patch_size
    if height % side or width % side:
        raise ValueError(f"image size {height} x {width} is not a multiple of the patch size "
                         f"{side}")
    batch = images.shape[0]
    pieces = []
    for top in range(0, height, side):          # grid rows, top to bottom
        for left in range(0, width, side):      # grid columns, left to right
            block = images[:, :, top:top + side, left:left + side]   # (B, C, P, P)
            pieces.append(block.reshape(batch, -1))                  # (channel, row, column)
    return torch.stack(pieces, dim=1)          # (B, N, C * P * P)


# %% day11_patch_embedding
class PatchEmbedding(nn.Module):
    """Linear embedding of non-overlapping patches, as a strided Conv2d.

    forward(images): (B, C, H, W) -> (B, N, d_model), N = (H / P) * (W / P), row-major.
    """

    def __init__(self, in_channels: int, patch_size: int, d_model: int) -> None:
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Conv2d(in_channels, d_model, kernel_size=patch_size, stride=patch_size)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        grid = self.proj(images)                     # (B, d_model, H/P, W/P)
        grid = grid.permute(0, 2, 3, 1)              # (B, H/P, W/P, d_model)
        return grid.flatten(start_dim=1, end_dim=2)  # (B, N, d_model), row-major


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
        self.head = nn.Linear(d_model, num_classes)
        self.norm = nn.LayerNorm(d_model)
        self.layers = nn.Sequential(
            *(TransformerEncoderLayer(d_model, num_heads, d_ff) for _ in range(num_layers)))
        self.pos_embedding = nn.Parameter(torch.empty(1, num_patches + 1, d_model))
        self.cls_token = nn.Parameter(torch.empty(1, 1, d_model))
        self.patch_embed = PatchEmbedding(in_channels, patch_size, d_model)
        with torch.no_grad():
            nn.init.trunc_normal_(self.pos_embedding, std=0.02)
            self.cls_token.normal_(0.0, 0.02)
            self.head.weight.normal_(0.0, 0.02)
            self.head.bias.zero_()

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        patches = self.patch_embed(images)                      # (B, N, d_model)
        batch, width = patches.shape[0], patches.shape[-1]
        pos_cls, pos_patches = self.pos_embedding[:, :1], self.pos_embedding[:, 1:]
        first = (self.cls_token + pos_cls).expand(batch, 1, width)   # (B, 1, d_model)
        tokens = torch.cat((first, patches + pos_patches), dim=1)    # (B, N + 1, d_model)
        tokens = self.layers(tokens)
        cls_state = self.norm(tokens[:, 0])                    # LayerNorm acts per position
        return self.head(cls_state)                            # (B, num_classes)
