"""Hidden tests of Day 11: patchify, PatchEmbedding, VisionTransformer.

Expected patches come from ``Tensor.unfold`` (an independent route to the same layout), the
patch embedding from ``F.linear`` with the judge's convolution weights reshaped, and the ViT's
forward from the contract on the weights the judge injected (``randomize``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from autograder.judge.checks import (
    CheckFailure,
    call,
    compare,
    expect_module,
    expect_tensor,
    expect_unchanged,
    inject,
    manual_seed,
    matches,
    observed_check,
    randomize,
    rng,
    shown,
    upstream,
    value_check,
)
from autograder.judge.checks import reference as ref
from course.device import check_runs_on_any_device

VIT_ATTRIBUTES = ("patch_embed", "cls_token", "pos_embedding", "layers", "norm", "head")


def _patches(images: torch.Tensor, P: int, column_major=False, channel_last=False):
    """Reference patchify via unfold: (B, C, H, W) -> (B, N, C*P*P)."""
    B, C, H, W = images.shape
    x = images.unfold(2, P, P).unfold(3, P, P)          # (B, C, gh, gw, P, P)
    if column_major:
        x = x.transpose(2, 3)                           # (B, C, gw, gh, P, P)
    x = x.permute(0, 2, 3, 1, 4, 5)                     # (B, g1, g2, C, P, P)
    if channel_last:
        x = x.permute(0, 1, 2, 4, 5, 3)                 # (B, g1, g2, P, P, C)
    return x.reshape(B, -1, C * P * P)


@value_check
def check_patchify(patchify) -> None:
    """Non-square 3-channel images; one-channel (B, H, W); the ValueError."""
    g = rng(110)
    images = torch.randn(2, 3, 8, 12, generator=g, dtype=torch.float64)   # 2 x 3 grid of P=4
    out = call(patchify, images, 4, name="patchify(images (2, 3, 8, 12), 4)")
    expect_tensor(out, "patchify(images (2, 3, 8, 12), 4)", shape=(2, 6, 48))
    pixel_order = images.unfold(2, 4, 4).unfold(3, 4, 4).permute(0, 2, 3, 4, 5, 1)
    compare(out, _patches(images, 4), "patches of (2, 3, 8, 12) images",
            {"your patches are in column-major order (down the first column first): use "
             "row-major order, patch i * (W / P) + j for grid row i, column j":
                 _patches(images, 4, column_major=True),
             "inside each patch the values are ordered (row, column, channel): order them "
             "(channel, row, column), the layout of a Conv2d weight":
                 _patches(images, 4, channel_last=True),
             "each patch vector mixes pixels of several patches: reshape to (B, C, H/P, P, W/P,"
             " P) and permute the grid axes to the front before flattening":
                 images.reshape(2, 3, 6, 16).permute(0, 2, 1, 3).reshape(2, 6, 48),
             "rows and columns of each patch are swapped":
                 pixel_order.permute(0, 1, 2, 5, 4, 3).reshape(2, 6, 48)},
            rtol=0, atol=0)
    gray = torch.randn(3, 6, 9, generator=g)
    out = call(patchify, gray, 3, name="patchify(images (3, 6, 9), 3)")
    expect_tensor(out, "patchify of one-channel (3, 6, 9) images", shape=(3, 6, 9))
    compare(out, _patches(gray.unsqueeze(1), 3), "patches of one-channel (B, H, W) images",
            rtol=0, atol=0)
    try:
        patchify(torch.zeros(1, 1, 10, 12), 4)
    except ValueError:
        pass
    except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything: diagnosed
        raise CheckFailure(f"patchify(images (1, 1, 10, 12), 4) raised {type(exc).__name__}: "
                           f"{exc}; raise a ValueError that says 10 is not a multiple of 4."
                           ) from exc
    else:
        raise CheckFailure("patchify(images (1, 1, 10, 12), 4) did not raise: 10 is not a "
                           "multiple of 4. Raise a ValueError instead of silently cropping.")


@value_check
def check_patch_embedding(PatchEmbedding) -> None:
    """A 3-channel, non-square PatchEmbedding = patchify + linear with reshaped conv weights."""
    manual_seed(0)
    embed = expect_module(PatchEmbedding, 3, 4, 10,
                          name="PatchEmbedding(in_channels=3, patch_size=4, d_model=10)")
    proj = getattr(embed, "proj", None)
    if not isinstance(proj, torch.nn.Conv2d):
        raise CheckFailure("PatchEmbedding should have self.proj = nn.Conv2d(in_channels, "
                           "d_model, kernel_size=patch_size, stride=patch_size); got "
                           f"{shown(proj)}.")
    if tuple(proj.stride) != (4, 4) or tuple(proj.kernel_size) != (4, 4):
        raise CheckFailure(f"proj has kernel_size {proj.kernel_size} and stride {proj.stride}: "
                           "both must equal patch_size so the patches do not overlap.")
    embed = embed.double()
    w = randomize(embed, 110)
    images = torch.randn(2, 3, 8, 12, generator=rng(111), dtype=torch.float64)
    out = call(embed, images, name="PatchEmbedding(images (2, 3, 8, 12))")
    expect_tensor(out, "PatchEmbedding output", shape=(2, 6, 10))
    with torch.no_grad():
        weight = w["proj.weight"].reshape(10, -1)                 # (d_model, C*P*P)
        expected = F.linear(_patches(images, 4), weight, w["proj.bias"])
        column = F.linear(_patches(images, 4, column_major=True), weight, w["proj.bias"])
        # the conv's (B, d_model, gh, gw) read straight into (B, N, d_model): channels mixed
        scrambled = expected.transpose(1, 2).reshape(2, 6, 10)
    compare(out, expected, "PatchEmbedding output",
            {"the patches come out in column-major order: flatten the (gh, gw) grid with "
             "flatten(2) and then transpose(1, 2)": column,
             "the conv's output (B, d_model, gh, gw) was reshaped to (B, N, d_model) without "
             "moving the d_model axis: reshape mixes channels of different patches; use "
             "flatten(2) then transpose(1, 2)": scrambled},
            rtol=1e-7, atol=1e-9)
    expect_unchanged(embed, w)


def _vit(VisionTransformer):
    model = expect_module(VisionTransformer, image_size=12, patch_size=4, in_channels=2,
                          num_classes=5, d_model=16, num_heads=2, num_layers=2, d_ff=24,
                          name="VisionTransformer(image_size=12, patch_size=4, in_channels=2, "
                               "num_classes=5, d_model=16, num_heads=2, num_layers=2, d_ff=24)")
    missing = [a for a in VIT_ATTRIBUTES if not hasattr(model, a)]
    if missing:
        raise CheckFailure(f"VisionTransformer has no attribute(s) {missing}: name the parts "
                           f"exactly {', '.join(VIT_ATTRIBUTES)}.")
    for name, shape in (("cls_token", (1, 1, 16)), ("pos_embedding", (1, 10, 16))):
        value = getattr(model, name)
        if not isinstance(value, torch.nn.Parameter):
            raise CheckFailure(f"{name} should be an nn.Parameter (learned), got "
                               f"{type(value).__name__}.")
        if tuple(value.shape) != shape:
            raise CheckFailure(f"{name} has shape {tuple(value.shape)}, expected {shape} (9 "
                               "patches + the CLS token)." if name == "pos_embedding" else
                               f"{name} has shape {tuple(value.shape)}, expected {shape}.")
    if float(model.pos_embedding.detach().abs().max()) == 0:
        raise CheckFailure("pos_embedding starts at all zeros: initialise it with small random "
                           "values (nn.init.trunc_normal_(self.pos_embedding, std=0.02)).")
    return model


def _patch_embedding_right(model, w) -> bool:
    """Whether the learner's PatchEmbedding (inside the ViT) is right on the judge's weights."""
    images = torch.randn(1, 2, 12, 12, generator=rng(115), dtype=torch.float64)
    expected = F.linear(_patches(images, 4), w["patch_embed.proj.weight"].reshape(16, -1),
                        w["patch_embed.proj.bias"])
    return matches(model.patch_embed(images), expected, rtol=1e-7, atol=1e-9)


@value_check
def check_vit_forward(VisionTransformer) -> None:
    """Forward = the contract on the judge's weights; CLS at position 0."""
    model = _vit(VisionTransformer).double().eval()
    w = randomize(model, 112)
    with torch.no_grad():       # a distinctive head, so every mistake shows
        w.update(inject(model, {"head.weight": w["head.weight"] * 25.0}))
    images = torch.randn(3, 2, 12, 12, generator=rng(113), dtype=torch.float64)
    out = call(model, images, name="VisionTransformer(images (3, 2, 12, 12))")
    expect_tensor(out, "ViT logits", shape=(3, 5))
    n_layers = len({k.split(".")[1] for k in w if k.startswith("layers.")})
    with torch.no_grad():
        tokens = F.linear(_patches(images, 4), w["patch_embed.proj.weight"].reshape(16, -1),
                          w["patch_embed.proj.bias"])                          # (3, 9, 16)
        cls = w["cls_token"].expand(3, -1, -1)
        pos = w["pos_embedding"]

        def head(h):
            return ref.linear(w, "head.", h)

        def run(h, final_norm=True):
            for i in range(n_layers):
                h = ref.encoder_layer(w, f"layers.{i}.", h, 2)
            return ref.layer_norm(w, "norm.", h) if final_norm else h

        h = run(torch.cat([cls, tokens], 1) + pos)                          # (3, 10, 16)
        right = head(h[:, 0])
        variants = {
            "you read the last position: the CLS token is at position 0 (h[:, 0])":
                head(h[:, -1]),
            "you read position 1 (the first patch): the CLS token is at position 0":
                head(h[:, 1]),
            "you averaged over the tokens: classify the CLS state h[:, 0]": head(h.mean(1)),
            "the position embedding is not added: add self.pos_embedding to the N + 1 tokens":
                head(run(torch.cat([cls, tokens], 1))[:, 0]),
            "the final LayerNorm is missing: apply self.norm after the last layer":
                head(run(torch.cat([cls, tokens], 1) + pos, False)[:, 0]),
            "you appended the CLS token at the end: prepend it at position 0":
                head(run(torch.cat([tokens, cls], 1) + pos)[:, -1]),
        }
    with upstream(("your PatchEmbedding fails day11_patch_embedding_equivalence",
                   lambda: _patch_embedding_right(model, w))):
        compare(out, right, "ViT logits", variants, rtol=1e-6, atol=1e-8,
                hint="the contract: patch_embed -> prepend cls_token -> + pos_embedding -> "
                     "layers -> norm -> head on position 0.")
    expect_unchanged(model, w)


@observed_check
def check_vit_device(VisionTransformer) -> None:
    """No tensor created on the wrong device (GPU when present, else the meta device)."""
    model = expect_module(VisionTransformer, image_size=8, patch_size=4, in_channels=1,
                          num_classes=3, d_model=8, num_heads=2, num_layers=1, d_ff=16)
    check_runs_on_any_device(model.eval(),
                             lambda: (torch.randn(2, 1, 8, 8, generator=rng(114)),),
                             "VisionTransformer")
