"""Day 8, second way: the population std (divide by N, torch.std_mean(correction=0)) in
float32; the channel axis removed with squeeze(1) and the formula in float32; the CLS token as
a zero-initialised parameter concatenated with repeat, the final norm over every position; a
plain loop clearing gradients by setting p.grad = None."""

# %% day08_normalization_stats
def normalization_stats(train_images: torch.Tensor) -> tuple[float, float]:
    """Mean and standard deviation of all pixels, after scaling 0-255 to [0, 1].

    Args:
        train_images: uint8 tensor (N, 28, 28), pixel values 0-255.

    Returns:
        (mean, std) as Python floats.
    """
    std, mean = torch.std_mean(train_images.float().div(255), correction=0)
    return mean.item(), std.item()


# %% day08_compute_stats
# Compute the statistics from the right split of `mnist`.
MEAN, STD = map(float, normalization_stats(mnist.train_images))
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
    if images.ndim == 4:
        images = images.squeeze(1)
    scaled = images.to(dtype=torch.float32) / 255
    return scaled.sub(mean).div(std)


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
        self.head = nn.Linear(d_model, num_classes)
        with torch.no_grad():
            self.head.weight.normal_(0.0, 0.02)
            self.head.bias.zero_()
        self.norm = nn.LayerNorm(d_model)
        self.layers = nn.ModuleList()
        for _ in range(num_layers):
            self.layers.append(TransformerEncoderLayer(d_model, num_heads, d_ff))
        self.pos_encoding = SinusoidalPositionalEncoding(d_model, max_len=max_len + 1)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.input_proj = nn.Linear(input_dim, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.size(0)
        h = torch.cat([self.cls_token.repeat(n, 1, 1), self.input_proj(x)], dim=1)
        h = self.pos_encoding(h)
        for block in self.layers:
            h = block(h, None)
        summary = self.norm(h)[:, 0, :]                                # (B, C)
        return self.head(summary)


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
    params = list(model.parameters())
    adam = torch.optim.Adam(params, lr=lr)
    recorded = []
    step = 0
    while step < steps:
        loss = F.nll_loss(F.log_softmax(model(inputs), dim=-1), labels)
        recorded.append(float(loss.detach()))
        for p in params:
            p.grad = None
        loss.backward()
        adam.step()
        step += 1
    return recorded
