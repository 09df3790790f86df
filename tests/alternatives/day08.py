"""Day 8 written another way: statistics as E[x^2] - E[x]^2 in float64 with Bessel's
correction; rows by reshape and a float64 affine map; the CLS token placed by padding the
projected rows and adding the zero-padded CLS parameter, the final LayerNorm on the CLS state
only; the training step inside an Adam closure."""

# %% day08_normalization_stats
def normalization_stats(train_images: torch.Tensor) -> tuple[float, float]:
    """Mean and standard deviation of all pixels, after scaling 0-255 to [0, 1].

    Args:
        train_images: uint8 tensor (N, 28, 28), pixel values 0-255.

    Returns:
        (mean, std) as Python floats.
    """
    pixels = train_images.reshape(-1).to(torch.float64) / 255.0
    count = pixels.numel()
    mean = pixels.sum() / count
    mean_sq = (pixels * pixels).sum() / count
    # sample variance (as torch.std): n / (n - 1) times the population variance
    var = (mean_sq - mean * mean).clamp_min(0.0) * count / (count - 1)
    return float(mean), float(var.sqrt())


# %% day08_compute_stats
# Compute the statistics from the right split of `mnist`.
train_stats = normalization_stats(mnist.train_images)
MEAN = train_stats[0]
STD = train_stats[1]
print(f"MEAN = {MEAN:.4f}, STD = {STD:.4f}")


# %% day08_images_to_rows
def images_to_rows(images: torch.Tensor, mean: float, std: float) -> torch.Tensor:
    """Normalized digits as sequences of row tokens.

    Args:
        images: uint8 (B, 28, 28) or (B, 1, 28, 28), pixel values 0-255.
        mean, std: statistics of the training split on the [0, 1] scale.

    Returns:
        float32 (B, 28, 28): token t is image row t (top to bottom), its 28 features the
        row's pixels (left to right), normalized as (x / 255 - mean) / std.
    """
    height, width = images.shape[-2], images.shape[-1]
    rows = images.reshape(images.shape[0], height, width)       # drops the channel axis if any
    scale = 1.0 / (255.0 * std)
    shift = mean / std
    return (rows.to(torch.float64) * scale - shift).to(torch.float32)


# %% day08_sequence_classifier
class SequenceClassifier(nn.Module):
    """A Transformer encoder that classifies a sequence of feature vectors.

    Args:
        input_dim: features per token (28 for MNIST rows).
        num_classes: output classes (10 digits).
        d_model, num_heads, d_ff, num_layers: sizes of the encoder.
        max_len: the longest input sequence (28 rows); the CLS token adds one position.

    forward(x): x (B, T, input_dim) with T <= max_len -> logits (B, num_classes).
    """

    def __init__(self, input_dim: int, num_classes: int, d_model: int, num_heads: int,
                 d_ff: int, num_layers: int, max_len: int) -> None:
        super().__init__()
        self.input_proj = nn.Linear(input_dim, d_model)
        self.cls_token = nn.Parameter(torch.empty(1, 1, d_model))
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.pos_encoding = SinusoidalPositionalEncoding(d_model, max_len + 1)
        self.layers = nn.ModuleList(
            TransformerEncoderLayer(d_model, num_heads, d_ff) for _ in range(num_layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, num_classes)
        nn.init.normal_(self.head.weight, mean=0.0, std=0.02)
        nn.init.zeros_(self.head.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq_len = x.shape[1]
        tokens = F.pad(self.input_proj(x), (0, 0, 1, 0))              # (B, T+1, C), row 0 = 0
        tokens = tokens + F.pad(self.cls_token, (0, 0, 0, seq_len))   # CLS into row 0 only
        tokens = self.pos_encoding(tokens)
        for layer in self.layers:
            tokens = layer(tokens)
        return self.head(self.norm(tokens[:, 0]))


# %% day08_overfit_one_batch
def overfit_one_batch(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor,
                      steps: int = 150, lr: float = 1e-3) -> list[float]:
    """Train ``model`` on one batch for ``steps`` Adam steps.

    Args:
        model: maps inputs (B, T, F) to logits (B, classes).
        inputs: (B, T, F) float; labels: (B,) int64.

    Returns:
        The loss before each step (``steps`` floats).
    """
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    history: list[float] = []

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs), labels)
        loss.backward()
        history.append(loss.item())
        return loss

    for _ in range(steps):
        optimizer.step(closure)
    return history
