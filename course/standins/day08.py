"""Day 8's stand-in: ``SequenceClassifier``, assembled from the stand-ins of Days 5 and 6.

The model itself is :class:`course.references.ReferenceSequenceClassifier`: Day 8's hidden tests
hand it to a learner's ``overfit_one_batch`` inside the Day 8 kernel, where this module is not
provided (no stand-in of a day is in the kernel that grades that day, see ``__init__``).
"""

from __future__ import annotations

from course.references import ReferenceSequenceClassifier

__all__ = ["SequenceClassifier"]


class SequenceClassifier(ReferenceSequenceClassifier):
    """Day 8's contract: ``SequenceClassifier(input_dim, num_classes, d_model, num_heads, d_ff,
    num_layers, max_len)``; (B, T, input_dim) -> logits (B, num_classes), read at CLS."""
