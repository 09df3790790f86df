"""Tests of course.training: augmentation, live plot, figures, Day 8/9 stand-ins, bug hunt."""

from __future__ import annotations

import math
import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from course import data, training  # noqa: E402
from course.previous import load_previous  # noqa: E402

MIRROR = Path(os.environ.get(data.MIRROR_ENV)
              or Path(__file__).resolve().parents[2] / "shared" / "data")


def test_does_random_shift_move_a_pixel_by_at_most_max_shift():
    """Does a single bright pixel stay within max_shift of where it was, with shapes kept?"""
    images = torch.zeros(50, 9, 9)
    images[:, 4, 4] = 1.0
    out = training.random_shift(images, 2, generator=torch.Generator().manual_seed(0))
    assert out.shape == images.shape and out.dtype == images.dtype
    rows, cols = torch.nonzero(out, as_tuple=True)[1:]
    assert len(rows) == 50                       # the pixel never falls off a 9 x 9 image
    assert (rows - 4).abs().max() <= 2 and (cols - 4).abs().max() <= 2
    assert (rows != 4).any() and (cols != 4).any()
    assert torch.equal(training.random_shift(images, 0), images)


def test_does_random_shift_fill_with_the_background_and_handle_channels():
    """Is the uncovered border the batch minimum, also for (B, C, H, W) input?"""
    images = torch.full((4, 3, 6, 6), 5.0)
    images[:, :, 0, 0] = -1.0
    out = training.random_shift(images, 1, generator=torch.Generator().manual_seed(1))
    assert out.shape == (4, 3, 6, 6)
    assert set(out.unique().tolist()) <= {-1.0, 5.0}


def test_does_shift_collate_stack_a_batch():
    """Does the collate function return (images (B, H, W), labels (B,))?"""
    collate = training.shift_collate(1)
    x, y = collate([(torch.zeros(5, 5), torch.tensor(3)), (torch.ones(5, 5), torch.tensor(4))])
    assert x.shape == (2, 5, 5) and y.tolist() == [3, 4]


def test_does_the_live_monitor_draw_losses_and_accuracies():
    """Outside a live kernel, does close() return one figure with both panels filled?"""
    monitor = training.LiveMonitor("t")
    for epoch in range(1, 4):
        monitor.log(epoch, train_loss=1.0 / epoch, heldout_accuracy=0.5 + 0.1 * epoch)
    fig = monitor.close()
    loss_ax, acc_ax = fig.axes[:2]
    assert len(loss_ax.lines) == 1 and len(acc_ax.lines) == 1
    assert acc_ax.lines[0].get_ydata()[-1] == pytest.approx(80.0)   # shown in percent
    plt.close(fig)


def test_does_the_confusion_matrix_count_pairs():
    """Do the counts in the confusion matrix image equal the (true, predicted) pairs?"""
    labels = torch.tensor([0, 0, 1, 2, 2, 2])
    preds = torch.tensor([0, 1, 1, 2, 2, 0])
    fig = training.plot_confusion_matrix(labels, preds, num_classes=3)
    counts = fig.axes[0].images[0].get_array()
    assert counts.tolist() == [[1, 1, 0], [0, 1, 0], [1, 0, 2]]
    plt.close(fig)


def test_does_the_sequence_classifier_standin_start_at_ln_10():
    """Does the Day 8 stand-in map (B, T, F) to (B, classes) with an initial loss near ln 10?"""
    torch.manual_seed(0)
    model = training.SequenceClassifier(28, 10, 32, 4, 64, 2, 28).eval()
    x = torch.randn(64, 28, 28)
    logits = model(x)
    assert logits.shape == (64, 10)
    loss = nn.functional.cross_entropy(logits, torch.randint(0, 10, (64,)))
    assert abs(loss.item() - math.log(10)) < 0.1


def test_do_the_day09_standins_train_and_evaluate():
    """Do the Day 9 stand-ins lower the loss, step the schedule per batch, and evaluate?"""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 6, generator=g), torch.randint(0, 3, (40,), generator=g)
    loader = [(x[i:i + 10], y[i:i + 10]) for i in range(0, 40, 10)]
    model = nn.Linear(6, 3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    scheduler = training.warmup_cosine_schedule(optimizer, 2, 40)
    before, _ = training.evaluate(model, loader)
    for _ in range(5):
        training.train_one_epoch(model, loader, optimizer, scheduler)
    after, accuracy = training.evaluate(model, loader)
    assert after < before and 0.0 <= accuracy <= 1.0
    assert scheduler.last_epoch == 20


def test_are_the_standins_registered_for_load_previous(monkeypatch):
    """With COURSE_USE_STANDINS set, does load_previous return the Day 8 and 9 stand-ins?"""
    monkeypatch.setenv("COURSE_USE_STANDINS", "1")
    assert load_previous("day08_mnist_as_sequences", "SequenceClassifier") is \
        training.SequenceClassifier
    fns = load_previous("day09_training_loop", "train_one_epoch", "evaluate",
                        "warmup_cosine_schedule")
    assert fns == (training.train_one_epoch, training.evaluate,
                   training.warmup_cosine_schedule)


def test_does_bug_hunt_reject_unknown_names():
    """Does bug_hunt name the set-ups when asked for one that does not exist?"""
    with pytest.raises(KeyError, match="healthy"):
        training.bug_hunt("Z")


@pytest.mark.skipif(not (MIRROR / "mnist").is_dir(), reason="no MNIST mirror")
def test_does_the_mask_setup_make_attention_one_hot(monkeypatch, tmp_path):
    """Does set-up D's mask leave every token attending only to itself (entropy 0)?"""
    monkeypatch.setenv(data.MIRROR_ENV, str(MIRROR))
    monkeypatch.setenv(data.CACHE_ENV, str(tmp_path))
    run = training.bug_hunt("D")
    weights = run.model.layers[0].attn.attn_weights                  # (B, H, 29, 29)
    assert torch.allclose(weights, torch.eye(29).expand_as(weights))
    assert len(run.losses) == 30 and all(isinstance(v, float) for v in run.losses)


@pytest.mark.parametrize("lr", [0, -1e-3, float("nan"), float("inf"), True, "1e-3"])
def test_does_lr_run_reject_a_rate_that_is_not_a_positive_number(lr):
    """Does lr_run refuse a rate it cannot train with, before any training?"""
    with pytest.raises(ValueError, match="positive, finite"):
        training.lr_run(lr)


@pytest.mark.skipif(not (MIRROR / "mnist").is_dir(), reason="no MNIST mirror")
def test_does_a_sweep_point_differ_only_by_its_rate(monkeypatch, tmp_path):
    """Do two rates start from the same weights (same first loss) and the healthy rate's run
    equal set-up "healthy" exactly, and held-out loss of a deterministic run repeat?"""
    monkeypatch.setenv(data.MIRROR_ENV, str(MIRROR))
    monkeypatch.setenv(data.CACHE_ENV, str(tmp_path))
    slow, healthy = training.lr_run(1e-4), training.lr_run(3e-3)
    assert slow.losses[0] == healthy.losses[0]
    assert healthy.losses == training.bug_hunt("healthy").losses
    assert healthy.heldout_loss() == healthy.heldout_loss()
    assert slow.losses[-1] > healthy.losses[-1]
