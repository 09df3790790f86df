"""What is inside the course's dataset files: the IDX format of MNIST, the batches of the
CIFAR-10 python tarball, and the seeded stratified split that makes MNIST-10k.

These readers take a verified local file (:func:`course.data.fetch` finds one) and give arrays or
tensors; a file that is not what it claims raises :class:`DatasetError`. Like
:mod:`course.data`, which re-exports every public name here, importing this module stays cheap:
numpy and torch are imported inside the readers.
"""

from __future__ import annotations

import gzip
import os
import pickle
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import torch

__all__ = ["MNIST_SPLIT_SEED", "DatasetError", "read_cifar_batches", "read_idx",
           "stratified_split"]

#: Seed of the MNIST-10k split (fixed: every learner gets the same 8,000 / 2,000 digits).
MNIST_SPLIT_SEED = 0


class DatasetError(RuntimeError):
    """A dataset file is missing, corrupted, truncated or malformed."""


_IDX_DTYPES = {0x08: "u1", 0x09: "i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an (uncompressed or ``.gz``) IDX file, the format of the MNIST files.

    Header: two zero bytes, a type code (0x08 = unsigned byte), the number of dimensions, then
    each dimension as a big-endian int32; the data follow in C order.

    Raises:
        DatasetError: bad magic number, unknown type code, or a size that does not match.
    """
    import numpy as np

    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_DTYPES:
        raise DatasetError(f"{path} is not an IDX file (bad magic number {data[:4]!r})")
    dtype = np.dtype(_IDX_DTYPES[data[2]])
    ndim = data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DatasetError(f"{path}: truncated IDX header")
    shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    expected = header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) != expected:
        raise DatasetError(f"{path}: IDX header says {shape} ({expected:,} bytes) but the file "
                           f"has {len(data):,} bytes")
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(shape).astype(
        dtype.newbyteorder("="), copy=True)


def stratified_split(labels: torch.Tensor, num_heldout: int, seed: int = MNIST_SPLIT_SEED
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices (train, heldout) with each class in the same proportion in both parts.

    Each class gives ``num_heldout * count / total`` held-out examples, rounded so the total is
    exactly ``num_heldout`` (largest remainders first); which ones is drawn with ``seed``.
    Both index tensors are sorted.
    """
    import torch

    labels = torch.as_tensor(labels)
    n = labels.numel()
    if not 0 <= num_heldout <= n:
        raise ValueError(f"num_heldout={num_heldout} must be between 0 and {n}")
    classes, counts = torch.unique(labels, return_counts=True)
    quota = counts.double() * num_heldout / n
    take = quota.floor().long()
    short = num_heldout - int(take.sum())
    if short:
        order = torch.argsort(quota - take, descending=True, stable=True)
        take[order[:short]] += 1
    g = torch.Generator().manual_seed(seed)
    heldout = []
    for c, k in zip(classes.tolist(), take.tolist(), strict=True):
        idx = torch.nonzero(labels == c).flatten()
        heldout.append(idx[torch.randperm(idx.numel(), generator=g)[:k]])
    mask = torch.zeros(n, dtype=torch.bool)
    mask[torch.cat(heldout)] = True
    return torch.nonzero(~mask).flatten(), torch.nonzero(mask).flatten()


def read_cifar_batches(path: Path, names: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """The images (N, 3, 32, 32) uint8 and labels (N,) int64 of the named batches of a
    CIFAR-10 python tarball (``data_batch_1``..., ``test_batch``)."""
    import numpy as np
    import torch

    xs, ys = [], []
    with tarfile.open(path, "r:gz") as tar:
        members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}
        for name in names:
            if name not in members:
                raise DatasetError(f"{path}: no {name} batch in the CIFAR-10 archive")
            f = tar.extractfile(members[name])
            # The archive's checksum was verified by fetch(), so unpickling it is safe.
            batch = pickle.load(f, encoding="bytes")  # noqa: S301
            data = np.asarray(batch[b"data"], dtype=np.uint8)
            xs.append(torch.from_numpy(data.reshape(-1, 3, 32, 32).copy()))
            ys.append(torch.tensor(batch[b"labels"], dtype=torch.long))
    return torch.cat(xs), torch.cat(ys)
