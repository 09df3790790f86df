"""Day 7 written another way: the layers appended in a loop, the CLS column of the mask made
with new_ones and indexed to (B, 1, 1, T+1) with None, the final LayerNorm applied to the CLS
state only; PyTorch's layer built on the right device/dtype and filled by one strict
load_state_dict, the key-padding mask as cat(new_zeros, logical_not)."""

# %% day07_classifier
class TransformerClassifier(nn.Module):
    """Pre-LN Transformer encoder with a CLS token and a linear head.

    Attributes:
        embedding, cls_token (1, 1, d_model), pos_encoding, layers (nn.ModuleList), norm, head.
    """

    def __init__(self, vocab_size: int, num_classes: int, d_model: int = 128,
                 num_heads: int = 8, d_ff: int = 512, num_layers: int = 2,
                 max_len: int = 512) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.pos_encoding = SinusoidalPositionalEncoding(d_model, max_len + 1)
        self.layers = nn.ModuleList()
        for _ in range(num_layers):
            self.layers.append(TransformerEncoderLayer(d_model, num_heads, d_ff))
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, tokens: torch.Tensor,
                padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """tokens: (B, T) long; padding_mask: (B, T) bool, True = real -> logits (B, classes)."""
        batch = tokens.shape[0]
        embedded = self.embedding(tokens)                                   # (B, T, C)
        cls = self.cls_token.expand(batch, 1, self.cls_token.shape[-1])     # (B, 1, C)
        h = self.pos_encoding(torch.cat((cls, embedded), dim=1))            # (B, T+1, C)
        mask = None
        if padding_mask is not None:
            cls_real = padding_mask.new_ones((batch, 1), dtype=torch.bool)  # same device
            mask = torch.cat((cls_real, padding_mask.bool()), dim=1)[:, None, None, :]
        for layer in self.layers:
            h = layer(h, mask)
        # LayerNorm works token by token, so normalising only the CLS state is the same
        return self.head(self.norm(h[:, 0, :]))


# %% day07_torch_encoder
def to_key_padding_mask(padding_mask: torch.Tensor) -> torch.Tensor:
    """This course's padding mask -> PyTorch's ``src_key_padding_mask`` with the CLS position.

    Args:
        padding_mask: (B, T) bool, True for real tokens.

    Returns:
        (B, T + 1) bool on the same device, True for keys to ignore; column 0 (CLS) is False.
    """
    ignore = padding_mask.bool().logical_not()                           # (B, T)
    cls_column = ignore.new_zeros((ignore.shape[0], 1))                  # (B, 1), False
    return torch.cat([cls_column, ignore], dim=-1)


def to_torch_encoder_layer(layer: nn.Module) -> nn.TransformerEncoderLayer:
    """A ``nn.TransformerEncoderLayer`` computing what your Day 6 ``layer`` computes.

    Args:
        layer: a ``TransformerEncoderLayer`` of Day 6 (``norm1``, ``attn`` with ``W_Q``,
            ``W_K``, ``W_V``, ``W_O`` and ``num_heads``, ``norm2``, ``ffn`` with ``linear1``,
            ``linear2``).

    Returns:
        A new Pre-LN, GELU, batch-first layer (dropout 0) with copies of ``layer``'s weights,
        on its device and dtype, in eval mode. Call it as ``torch_layer(x,
        src_key_padding_mask=...)`` with x (B, T, C).
    """
    attn, ffn = layer.attn, layer.ffn
    d_ff, d_model = ffn.linear1.weight.shape
    ref = layer.norm1.weight
    torch_layer = nn.TransformerEncoderLayer(
        d_model, attn.num_heads, dim_feedforward=d_ff, dropout=0.0, activation="gelu",
        layer_norm_eps=layer.norm1.eps, batch_first=True, norm_first=True,
        device=ref.device, dtype=ref.dtype,
    )
    torch_layer.norm2.eps = layer.norm2.eps
    state = {
        "self_attn.in_proj_weight": torch.cat([attn.W_Q.weight, attn.W_K.weight,
                                               attn.W_V.weight], dim=0),
        "self_attn.in_proj_bias": torch.cat([attn.W_Q.bias, attn.W_K.bias, attn.W_V.bias]),
        "self_attn.out_proj.weight": attn.W_O.weight,
        "self_attn.out_proj.bias": attn.W_O.bias,
        "linear1.weight": ffn.linear1.weight,
        "linear1.bias": ffn.linear1.bias,
        "linear2.weight": ffn.linear2.weight,
        "linear2.bias": ffn.linear2.bias,
        "norm1.weight": layer.norm1.weight,
        "norm1.bias": layer.norm1.bias,
        "norm2.weight": layer.norm2.weight,
        "norm2.bias": layer.norm2.bias,
    }
    with torch.no_grad():
        torch_layer.load_state_dict({k: v.detach() for k, v in state.items()}, strict=True)
    return torch_layer.eval()
