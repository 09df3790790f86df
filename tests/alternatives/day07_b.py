"""Day 7, second way: the CLS token copied with repeat, a mask always built (all True when no
padding is given) by F.pad with value True, the final norm over every position before reading
CLS; PyTorch's layer built with defaults, moved with .to() and filled parameter by parameter
with copy_, the key-padding mask as F.pad(~mask) with a False column."""

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
        self.layers = nn.ModuleList([TransformerEncoderLayer(d_model, num_heads, d_ff)
                                     for _ in range(num_layers)])
        self.head = nn.Linear(d_model, num_classes)
        self.norm = LayerNorm(d_model)
        self.pos_encoding = SinusoidalPositionalEncoding(d_model, max_len=max_len + 1)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.embedding = nn.Embedding(vocab_size, d_model)

    def forward(self, tokens: torch.Tensor,
                padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """tokens: (B, T) long; padding_mask: (B, T) bool, True = real -> logits (B, classes)."""
        B, T = tokens.shape
        if padding_mask is None:
            padding_mask = torch.ones(B, T, dtype=torch.bool, device=tokens.device)
        keys = F.pad(padding_mask.bool(), (1, 0), value=True).view(B, 1, 1, T + 1)
        seq = torch.cat([self.cls_token.repeat(B, 1, 1), self.embedding(tokens)], dim=1)
        seq = self.pos_encoding(seq)
        for block in self.layers:
            seq = block(seq, mask=keys)
        return self.head(self.norm(seq).select(1, 0))


# %% day07_torch_encoder
def to_key_padding_mask(padding_mask: torch.Tensor) -> torch.Tensor:
    """This course's padding mask -> PyTorch's ``src_key_padding_mask`` with the CLS position.

    Args:
        padding_mask: (B, T) bool, True for real tokens.

    Returns:
        (B, T + 1) bool on the same device, True for keys to ignore; column 0 (CLS) is False.
    """
    return F.pad(~padding_mask.bool(), (1, 0), value=False)


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
    C = layer.norm1.weight.numel()
    hidden = layer.ffn.linear1.out_features
    new = nn.TransformerEncoderLayer(C, layer.attn.num_heads, hidden, 0.0, F.gelu,
                                     batch_first=True, norm_first=True)
    new.norm1.eps, new.norm2.eps = layer.norm1.eps, layer.norm2.eps
    new = new.to(device=layer.norm1.weight.device, dtype=layer.norm1.weight.dtype)
    a = layer.attn
    with torch.no_grad():
        for i, proj in enumerate((a.W_Q, a.W_K, a.W_V)):
            new.self_attn.in_proj_weight[i * C:(i + 1) * C].copy_(proj.weight)
            new.self_attn.in_proj_bias[i * C:(i + 1) * C].copy_(proj.bias)
        new.self_attn.out_proj.weight.copy_(a.W_O.weight)
        new.self_attn.out_proj.bias.copy_(a.W_O.bias)
        for mine, theirs in ((layer.ffn.linear1, new.linear1), (layer.ffn.linear2, new.linear2),
                             (layer.norm1, new.norm1), (layer.norm2, new.norm2)):
            theirs.weight.copy_(mine.weight)
            theirs.bias.copy_(mine.bias)
    new.eval()
    return new
