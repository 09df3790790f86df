"""Day 13 written another way: index-broadcast windows, log_softmax/gather losses in float64,
a cos^2 schedule driven by LambdaLR, hand-written clipping, pairwise top-p, incremental BPE."""

# %% day13_tokenizer
class CharTokenizer:
    """Character-level tokenizer: one id per distinct character of ``text``, in sorted order.

    Attributes: chars (sorted list), vocab_size (int), stoi (dict str -> int),
    itos (dict int -> str).
    """

    def __init__(self, text: str) -> None:
        seen = dict.fromkeys(text)                    # distinct characters, first-seen order
        self.chars = sorted(seen)
        self.itos = dict(enumerate(self.chars))
        self.stoi = {ch: i for i, ch in self.itos.items()}
        self.vocab_size = len(self.itos)

    def encode(self, s: str) -> list[int]:
        """Text -> list of ids. Raises ValueError naming any unknown character."""
        unknown = [ch for ch in dict.fromkeys(s) if ch not in self.stoi]
        if unknown:
            ch = unknown[0]
            raise ValueError(f"character {ch!r} ({ch}) is not in the vocabulary")
        return list(map(self.stoi.__getitem__, s))

    def decode(self, ids: list[int]) -> str:
        """List of ids -> text."""
        pieces = []
        for i in ids:
            pieces.append(self.itos[int(i)])
        return "".join(pieces)


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
    starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    # one row of positions per window: (B, 1) + (1, T + 1) -> (B, T + 1)
    offsets = torch.arange(block_size + 1, device=starts.device)
    positions = (starts[:, None] + offsets[None, :]).to(data.device)
    windows = data[positions]                         # (B, T + 1)
    return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()


# %% day13_estimate_loss
def estimate_loss(model: torch.nn.Module, data: torch.Tensor, batch_size: int, block_size: int,
                  eval_iters: int = 10, generator: torch.Generator | None = None) -> float:
    """Mean next-token cross-entropy (nats) of ``model`` over ``eval_iters`` random batches.

    The model runs in eval mode without gradients; its previous mode is restored.
    Returns a Python float.
    """
    first = next(iter(model.parameters()), None)
    device = first.device if first is not None else data.device
    previous_mode = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        with torch.set_grad_enabled(False):
            for _ in range(eval_iters):
                x, y = get_batch(data, batch_size, block_size, generator=generator)
                x, y = x.to(device), y.to(device)
                logp = torch.log_softmax(model(x).double(), dim=-1)           # (B, T, V)
                nll = -logp.gather(-1, y.unsqueeze(-1)).squeeze(-1)           # (B, T)
                total += float(nll.sum())
                count += nll.numel()
    finally:
        model.train(previous_mode)
    return total / count


# %% day13_get_lr
def get_lr(step: int, max_lr: float, warmup_steps: int, total_steps: int,
           min_lr: float = 0.0) -> float:
    """Learning rate at ``step`` (0-based): linear warmup, then cosine decay to ``min_lr``."""
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    progress = (step - warmup_steps) / (total_steps - warmup_steps)     # in [0, 1)
    # (1 + cos(pi p)) / 2 == cos^2(pi p / 2)
    return min_lr + (max_lr - min_lr) * math.cos(0.5 * math.pi * progress) ** 2


# %% day13_train
def train(model: torch.nn.Module, train_data: torch.Tensor, val_data: torch.Tensor, *,
          steps: int, batch_size: int, block_size: int, max_lr: float, warmup_steps: int,
          eval_every: int, eval_iters: int = 10, grad_clip: float = 1.0,
          generator: torch.Generator | None = None) -> dict[str, list]:
    """Train ``model`` with AdamW, warmup + cosine decay (to max_lr / 10) and gradient clipping.

    Returns a history dict with lists "step", "train_loss", "val_loss" (one entry every
    ``eval_every`` steps and one after the last step).
    """
    device = next(model.parameters()).device
    params = [p for p in model.parameters()]
    optimizer = torch.optim.AdamW(params, lr=max_lr, betas=(0.9, 0.99), weight_decay=0.1)
    # LambdaLR multiplies the initial lr (max_lr) by the factor of the current step
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: get_lr(s, max_lr, warmup_steps, steps, min_lr=max_lr / 10) / max_lr)
    history: dict[str, list] = {"step": [], "train_loss": [], "val_loss": []}
    model.train()
    for step in tqdm(range(steps)):
        x, y = get_batch(train_data, batch_size, block_size, generator=generator)
        x, y = x.to(device), y.to(device)
        logits = model(x)                                                  # (B, T, V)
        logp = F.log_softmax(logits, dim=-1)
        loss = F.nll_loss(logp.flatten(0, 1), y.flatten())
        for p in params:
            p.grad = None
        loss.backward()
        grads = [p.grad for p in params if p.grad is not None]
        norm = torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(g.detach(), 2) for g in grads]), 2)
        scale = torch.clamp(grad_clip / (norm + 1e-6), max=1.0)
        for g in grads:
            g.mul_(scale)
        optimizer.step()
        scheduler.step()
        done = step + 1
        if done % eval_every == 0 or done == steps:
            history["step"].append(done)
            history["train_loss"].append(estimate_loss(model, train_data, batch_size,
                                                       block_size, eval_iters))
            history["val_loss"].append(estimate_loss(model, val_data, batch_size,
                                                     block_size, eval_iters))
    return history


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
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    seq = idx
    for _ in range(max_new_tokens):
        length = seq.size(1)
        keep = min(length, model.n_ctx)
        context = seq.narrow(1, length - keep, keep)                     # (B, <= n_ctx)
        scaled = model(context)[:, -1, :] / temperature                  # (B, V)
        if top_k is not None:
            k = min(top_k, scaled.size(-1))
            chosen = scaled.topk(k, dim=-1).indices                      # (B, k)
            allowed = torch.zeros_like(scaled, dtype=torch.bool).scatter_(-1, chosen, True)
            scaled = scaled.masked_fill(~allowed, float("-inf"))
        probs = torch.softmax(scaled, dim=-1)                            # (B, V)
        if top_p is not None:
            # mass of the tokens strictly more likely than each token: (B, V, 1) vs (B, 1, V)
            above = probs.unsqueeze(1) > probs.unsqueeze(2)              # [b, i, j]: p_j > p_i
            mass_before = (above * probs.unsqueeze(1)).sum(-1)           # (B, V)
            probs = torch.where(mass_before >= top_p, torch.zeros_like(probs), probs)
            probs = probs / probs.sum(-1, keepdim=True)
        nxt = torch.multinomial(probs, 1, generator=generator)           # (B, 1)
        seq = torch.cat([seq, nxt.to(seq.device)], dim=1)
    return seq


# %% day13_bpe_merge
def merge(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """A new list: ``ids`` with each occurrence of ``pair`` replaced by ``new_id``, scanning
    from the left, never overlapping (``merge([5, 5, 5], (5, 5), 9) == [9, 5]``)."""
    out: list[int] = []
    skip = False
    for a, b in zip(ids, [*ids[1:], None], strict=False):   # [] -> no rows
        if skip:
            skip = False
            continue
        if (a, b) == tuple(pair):
            out.append(new_id)
            skip = True
        else:
            out.append(a)
    return out


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
    base = sorted(set(text)) if chars is None else list(chars)
    stoi = {ch: i for i, ch in enumerate(base)}
    missing = set(text) - set(stoi)
    if missing:
        raise ValueError(f"characters not in chars: {sorted(missing)!r}")
    chunk_counts = Counter(PRETOKENIZE.findall(text))
    words = [[stoi[ch] for ch in w] for w in chunk_counts]
    weights = list(chunk_counts.values())

    # pair counts kept up to date incrementally; where[pair] = the chunks that hold it
    counts: Counter = Counter()
    where: dict[tuple[int, int], set[int]] = {}
    for w, (ids, n) in enumerate(zip(words, weights, strict=True)):
        for pr in zip(ids, ids[1:], strict=False):
            counts[pr] += n
            where.setdefault(pr, set()).add(w)

    merges: list[tuple[int, int]] = []
    for i in range(num_merges):
        live = [pr for pr, c in counts.items() if c > 0]
        if not live:
            break
        best = min(live, key=lambda pr: (-counts[pr], pr))
        new_id = len(base) + i
        merges.append(best)
        for w in sorted(where.get(best, ())):
            old = words[w]
            if best not in zip(old, old[1:], strict=False):
                continue
            n = weights[w]
            for pr in zip(old, old[1:], strict=False):
                counts[pr] -= n
            fresh = merge(old, best, new_id)
            for pr in zip(fresh, fresh[1:], strict=False):
                counts[pr] += n
                where.setdefault(pr, set()).add(w)
            words[w] = fresh
        counts = Counter({pr: c for pr, c in counts.items() if c > 0})
    return merges


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
        for ch in s:
            if ch not in self.stoi:
                raise ValueError(f"unknown character {ch!r} ({ch}): not in chars")
        # A merge only creates pairs holding its new id, whose ranks are larger, and leaves
        # none of its own pair behind: applying every merge once, in rank order, is the same
        # as repeatedly merging the lowest-ranked pair present.
        ordered = sorted(self.ranks.items(), key=lambda item: item[1])
        n_base = len(self.chars)
        cache: dict[str, list[int]] = {}
        out: list[int] = []
        for chunk in PRETOKENIZE.findall(s):
            if chunk not in cache:
                ids = [self.stoi[ch] for ch in chunk]
                for pair, rank in ordered:
                    if len(ids) < 2:
                        break
                    if pair[0] in ids and pair[1] in ids:
                        ids = merge(ids, pair, n_base + rank)
                cache[chunk] = ids
            out.extend(cache[chunk])
        return out

    def decode(self, ids: list[int]) -> str:
        """Ids -> text."""
        return "".join(self.vocab[i] for i in ids)
