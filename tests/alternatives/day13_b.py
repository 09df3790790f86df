"""Day 13, a second way: unfold windows, inference_mode, class-dim cross-entropy, sin^2 decay,
kthvalue top-k, ascending-sort top-p and Gumbel-max (exponential race) sampling, plain BPE."""

# %% day13_tokenizer
class CharTokenizer:
    """Character-level tokenizer: one id per distinct character of ``text``, in sorted order.

    Attributes: chars (sorted list), vocab_size (int), stoi (dict str -> int),
    itos (dict int -> str).
    """

    def __init__(self, text: str) -> None:
        self.chars = sorted(set(text))
        self.vocab_size = len(self.chars)
        self.stoi, self.itos = {}, {}
        for i, ch in enumerate(self.chars):
            self.stoi[ch] = i
            self.itos[i] = ch

    def encode(self, s: str) -> list[int]:
        """Text -> list of ids. Raises ValueError naming any unknown character."""
        ids = []
        for ch in s:
            try:
                ids.append(self.stoi[ch])
            except KeyError:
                raise ValueError(f"unknown character: {ch!r} / {ch}") from None
        return ids

    def decode(self, ids: list[int]) -> str:
        """List of ids -> text."""
        return "".join(self.itos[i] for i in ids)


# %% day13_get_batch
def get_batch(data: torch.Tensor, batch_size: int, block_size: int,
              generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows of ``data`` and their next-token targets.

    Args:
        data: (N_tokens,) long tensor of token ids.
        batch_size: B, number of windows.
        block_size: T, length of each window.
        generator: optional torch.Generator for reproducible starting points.

    Returns:
        x: (B, T) long, x[b] = data[i_b : i_b + T].
        y: (B, T) long, y[b] = data[i_b + 1 : i_b + T + 1] (x shifted by one).
    """
    ix = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    # every window of T + 1 tokens, as a view: (N - T, T + 1); row i starts at data[i]
    all_windows = data.unfold(0, block_size + 1, 1)
    picked = all_windows[ix.to(data.device)]                  # (B, T + 1), a copy
    y = picked[:, 1:].clone()
    x = picked[:, :block_size].clone()
    return x, y


# %% day13_estimate_loss
def estimate_loss(model: torch.nn.Module, data: torch.Tensor, batch_size: int, block_size: int,
                  eval_iters: int = 10, generator: torch.Generator | None = None) -> float:
    """Mean next-token cross-entropy (nats) of ``model`` over ``eval_iters`` random batches.

    The model runs in eval mode without gradients; its previous mode is restored.
    Returns a Python float.
    """
    was_training = model.training
    tensors = list(model.parameters()) + list(model.buffers())
    device = tensors[0].device if tensors else data.device
    losses = torch.empty(eval_iters, dtype=torch.float64)
    model.train(False)
    with torch.inference_mode():
        for k in range(eval_iters):
            xb, yb = get_batch(data, batch_size, block_size, generator)
            logits = model(xb.to(device))                              # (B, T, V)
            # classes in dimension 1: (B, V, T) against (B, T)
            losses[k] = F.cross_entropy(logits.transpose(1, 2), yb.to(device)).item()
    model.train(was_training)
    return losses.mean().item()


# %% day13_get_lr
def get_lr(step: int, max_lr: float, warmup_steps: int, total_steps: int,
           min_lr: float = 0.0) -> float:
    """Learning rate at ``step`` (0-based): linear warmup, then cosine decay to ``min_lr``."""
    if step > total_steps:
        return min_lr
    if step >= warmup_steps:
        span = max(total_steps - warmup_steps, 1)
        angle = math.pi * (step - warmup_steps) / span
        # (1 + cos a) / 2 = 1 - sin^2(a / 2): the drop from the peak
        return max_lr - (max_lr - min_lr) * math.sin(angle / 2) ** 2
    fraction = (step + 1) / warmup_steps
    return fraction * max_lr


# %% day13_train
def train(model: torch.nn.Module, train_data: torch.Tensor, val_data: torch.Tensor, *,
          steps: int, batch_size: int, block_size: int, max_lr: float, warmup_steps: int,
          eval_every: int, eval_iters: int = 10, grad_clip: float = 1.0,
          generator: torch.Generator | None = None) -> dict[str, list]:
    """Train ``model`` with AdamW, warmup + cosine decay (to max_lr / 10) and gradient clipping.

    Returns a history dict with lists "step", "train_loss", "val_loss" (one entry every
    ``eval_every`` steps and one after the last step).
    """
    opt = torch.optim.AdamW(model.parameters(), lr=max_lr, betas=(0.9, 0.99), weight_decay=0.1)
    where = next(model.parameters()).device
    floor = 0.1 * max_lr
    checkpoints = set(range(eval_every, steps + 1, eval_every)) | {steps}
    steps_seen, train_losses, val_losses = [], [], []
    for s in tqdm(range(steps)):
        lr = get_lr(s, max_lr, warmup_steps, steps, min_lr=floor)
        for group in opt.param_groups:
            group["lr"] = lr
        xb, yb = (t.to(where) for t in get_batch(train_data, batch_size, block_size,
                                                 generator=generator))
        out = model(xb)                                                 # (B, T, V)
        loss = F.cross_entropy(out.transpose(1, 2), yb)                 # (B, V, T) vs (B, T)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip, foreach=True)
        opt.step()
        if s + 1 in checkpoints:
            steps_seen.append(s + 1)
            train_losses.append(estimate_loss(model, train_data, batch_size, block_size,
                                              eval_iters=eval_iters))
            val_losses.append(estimate_loss(model, val_data, batch_size, block_size,
                                            eval_iters=eval_iters))
            model.train()
    return {"val_loss": val_losses, "train_loss": train_losses, "step": steps_seen}


# %% day13_generate
@torch.no_grad()
def generate(model: torch.nn.Module, idx: torch.Tensor, max_new_tokens: int,
             temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
             generator: torch.Generator | None = None) -> torch.Tensor:
    """Sample ``max_new_tokens`` tokens after ``idx`` (B, T) -> (B, T + max_new_tokens).

    The context is cropped to the last ``model.n_ctx`` tokens. ``temperature`` must be > 0;
    ``top_k`` larger than the vocabulary is clamped; ``top_p`` keeps the smallest set of tokens
    whose probability reaches p (never empty).
    """
    if temperature <= 0:
        raise ValueError("temperature must be > 0 (use top_k=1 for greedy decoding)")
    out = [idx]
    current = idx
    for _ in range(max_new_tokens):
        logits = model(current[:, -model.n_ctx:])[:, -1].double() / temperature   # (B, V)
        V = logits.shape[-1]
        if top_k is not None and top_k < V:
            # the k-th largest is the (V - k + 1)-th smallest; keep every logit >= it
            kth = logits.kthvalue(V - top_k + 1, dim=-1, keepdim=True).values     # (B, 1)
            logits = torch.where(logits >= kth, logits, torch.full_like(logits, -math.inf))
        if top_p is not None:
            probs = logits.softmax(-1)
            asc, order = probs.sort(dim=-1)                                      # ascending
            # in decreasing order, the mass before a token is all the mass above it
            above = probs.sum(-1, keepdim=True) - asc.cumsum(-1)
            drop_sorted = above >= top_p
            drop_sorted[..., -1] = False                   # the most likely token always stays
            drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
            logits = logits.masked_fill(drop, -math.inf)
        # Gumbel-max as an exponential race: argmax(logit - log E), E ~ Exp(1), draws
        # index i with probability softmax(logits)_i
        race = torch.empty_like(logits).exponential_(generator=generator)
        nxt = (logits - race.clamp_min(1e-300).log()).argmax(-1, keepdim=True)     # (B, 1)
        out.append(nxt.to(idx.device, idx.dtype))
        current = torch.cat([current, out[-1]], dim=1)
    return torch.cat(out, dim=1)


# %% day13_bpe_merge
def merge(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """A new list: ``ids`` with each occurrence of ``pair`` replaced by ``new_id``, scanning
    from the left, never overlapping (``merge([5, 5, 5], (5, 5), 9) == [9, 5]``)."""
    first, second = pair
    result: list[int] = []
    open_left = False             # result[-1] is an input id that may still start the pair
    for t in ids:
        if open_left and result[-1] == first and t == second:
            result[-1] = new_id
            open_left = False
        else:
            result.append(t)
            open_left = True
    return result


# %% day13_train_bpe
def train_bpe(text: str, num_merges: int,
              chars: list[str] | None = None) -> list[tuple[int, int]]:
    """Learn up to ``num_merges`` merges from ``text``.

    Args:
        text: the training text.
        num_merges: how many merges to learn; fewer when no pair is left to merge.
        chars: the base vocabulary, id i for chars[i] (default ``sorted(set(text))``); it must
            contain every character of ``text``.

    Returns:
        merges: a list of (id, id) pairs; merges[i] made the id len(chars) + i.
    """
    if chars is None:
        chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    chunks = {tuple(index[c] for c in word): n
              for word, n in Counter(PRETOKENIZE.findall(text)).items()}
    learned: list[tuple[int, int]] = []
    while len(learned) < num_merges:
        stats: dict[tuple[int, int], int] = {}
        for word, n in chunks.items():
            for j in range(len(word) - 1):
                key = (word[j], word[j + 1])
                stats[key] = stats.get(key, 0) + n
        if not stats:
            break
        # largest count; among equal counts the smallest pair (a, then b)
        top = max(stats, key=lambda q: (stats[q], -q[0], -q[1]))
        made = len(chars) + len(learned)
        learned.append(top)
        merged: dict[tuple[int, ...], int] = {}
        for word, n in chunks.items():
            w = tuple(merge(list(word), top, made))
            merged[w] = merged.get(w, 0) + n
        chunks = merged
    return learned


# %% day13_bpe_tokenizer
class BPETokenizer:
    """Byte-pair encoding on top of characters.

    ``BPETokenizer(chars, merges)``: ids 0..len(chars)-1 are the characters, id len(chars) + i
    the pair merges[i] joined. Attributes: chars, stoi (dict str -> int), ranks (dict pair ->
    i), vocab (list: id -> the text it stands for), vocab_size (int).
    """

    def __init__(self, chars: list[str], merges: list[tuple[int, int]]) -> None:
        self.chars = list(chars)
        self.stoi = {ch: i for i, ch in enumerate(self.chars)}
        self.ranks = {tuple(pair): i for i, pair in enumerate(merges)}
        self.vocab = list(self.chars)
        for a, b in merges:
            self.vocab.append(self.vocab[a] + self.vocab[b])
        self.vocab_size = len(self.vocab)

    def encode(self, s: str) -> list[int]:
        """Text -> ids: each chunk of ``PRETOKENIZE`` as character ids, then, while a learned
        pair is present, merge the one of lowest rank. Raises ValueError naming any character
        that is not in ``chars``."""
        bad = sorted(set(s) - self.stoi.keys())
        if bad:
            raise ValueError(f"characters not in chars: {bad} ({''.join(bad)})")
        never = len(self.ranks) + 1
        result: list[int] = []
        for piece in PRETOKENIZE.findall(s):
            toks = [self.stoi[c] for c in piece]
            while len(toks) > 1:
                adjacent = set(zip(toks[:-1], toks[1:], strict=True))
                best = min(adjacent, key=lambda q: self.ranks.get(q, never))
                if best not in self.ranks:
                    break
                toks = merge(toks, best, len(self.chars) + self.ranks[best])
            result += toks
        return result

    def decode(self, ids: list[int]) -> str:
        """Ids -> text."""
        return "".join(self.vocab[i] for i in ids)
