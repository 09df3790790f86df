"""The course's datasets: download once, verify, cache, load.

Every file the course uses is listed in :data:`REGISTRY` with its canonical public URL(s) and
the checksum of its *content* (after gunzip for ``.gz`` files). :func:`fetch` returns the path of
a verified local copy, looking in this order:

1. the cache folder (``COURSE_CACHE_DIR``, else ``pooch.os_cache("transformers-from-scratch")``);
2. a local mirror, when the environment variable ``COURSE_DATA_DIR`` names one (same layout as
   the registry's ``mirror_path``, for example ``<mirror>/mnist/t10k-images-idx3-ubyte.gz``);
   mirrors may recompress files, so only the decompressed content is checked;
3. the copy shipped with the course (:data:`SHIPPED_DIR`, ``course/datasets/``, same layout:
   the MNIST test files and Tiny Shakespeare, with their attribution, licences and checksums in
   its ``README.md``), so that the main path of every day works with no network;
4. the network: pooch downloads each URL in turn with a progress bar (``offline=True``: never).

A copy whose content does not match the checksum (a truncated or corrupted download, a broken
mirror file) is rejected with :class:`DatasetError` and never left in the cache; a damaged
shipped copy is passed over for the network, and named in the error when that fails too.
Offline and not cached, :class:`DatasetUnavailable` names the dataset, the URL, the cache
folder and the environment variable to point at a copy. Nothing touches the network at import
time.

Loaders built on :func:`fetch`:

- :func:`load_tinyshakespeare` -> ``str`` (1,115,394 characters; Days 12-14).
- :func:`load_mnist` -> :class:`MNISTSplit`. By default "MNIST-10k": the official 10,000-digit
  test set split with a fixed seed, stratified by class, into 8,000 training and 2,000 held-out
  digits. ``full=True`` gives the official 60,000 / 10,000 sets (downloads 11 MB more).
- :func:`load_cifar10` -> :class:`CIFAR10Split` (the official python tarball, 163 MB).

This module holds the registry, the fetching and the loaders; what is inside the files (the IDX
reader, the CIFAR-10 batches, the stratified split, :class:`DatasetError`) is read by
:mod:`course.datafiles`, whose names are importable from here too.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from course.datafiles import (
    MNIST_SPLIT_SEED,
    DatasetError,
    read_cifar_batches,
    read_idx,
    stratified_split,
)

# numpy and torch are imported inside the loaders: `import course.data` stays cheap (the
# grader asks it for the cache folder before a kernel starts).
if TYPE_CHECKING:
    import torch

__all__ = [
    "CACHE_ENV",
    "MIRROR_ENV",
    "REGISTRY",
    "SHIPPED",
    "SHIPPED_DIR",
    "CIFAR10_CLASSES",
    "CIFAR10Split",
    "DataFile",
    "DatasetError",
    "DatasetUnavailable",
    "MNISTSplit",
    "cache_dir",
    "fetch",
    "load_cifar10",
    "load_mnist",
    "load_tinyshakespeare",
    "read_idx",
    "stratified_split",
]

MIRROR_ENV = "COURSE_DATA_DIR"
CACHE_ENV = "COURSE_CACHE_DIR"
#: The datasets shipped inside the course package (laid out like a mirror).
SHIPPED_DIR = Path(__file__).parent / "datasets"
#: Held-out digits of the MNIST-10k split (drawn with :data:`MNIST_SPLIT_SEED`).
MNIST_HELDOUT = 2_000

_MNIST_URLS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",   # PyTorch's mirror of LeCun's files
    "http://yann.lecun.com/exdb/mnist/",                 # the original site (often throttled)
)


@dataclass(frozen=True)
class DataFile:
    """One file of a dataset.

    Attributes:
        dataset: the dataset it belongs to (``mnist``, ``tinyshakespeare``, ``cifar10``).
        urls: canonical public URLs, tried in order.
        mirror_path: path relative to a mirror folder or a test server's base URL.
        checksum: ``"md5:<hex>"`` or ``"sha256:<hex>"`` of the content after gunzip
            (for ``gzip=False``, of the file itself).
        gzip: whether the download is gzip-compressed (it is decompressed into the cache).
        size: bytes of the verified content (for messages only).
    """

    dataset: str
    urls: tuple[str, ...]
    mirror_path: str
    checksum: str
    gzip: bool
    size: int

    @property
    def filename(self) -> str:
        """Name of the verified (decompressed) file in the cache."""
        name = Path(self.mirror_path).name
        return name[:-3] if self.gzip and name.endswith(".gz") else name


def _mnist(stem: str, md5: str, size: int) -> DataFile:
    return DataFile("mnist", tuple(u + stem + ".gz" for u in _MNIST_URLS),
                    f"mnist/{stem}.gz", f"md5:{md5}", True, size)


#: name -> DataFile. The MNIST md5 values are the widely published ones of the raw IDX files.
REGISTRY: dict[str, DataFile] = {
    "mnist-test-images": _mnist("t10k-images-idx3-ubyte", "2646ac647ad5339dbf082846283269ea",
                                7_840_016),
    "mnist-test-labels": _mnist("t10k-labels-idx1-ubyte", "27ae3e4e09519cfbb04c329615203637",
                                10_008),
    "mnist-train-images": _mnist("train-images-idx3-ubyte", "6bbc9ace898e44ae57da46a324031adb",
                                 47_040_016),
    "mnist-train-labels": _mnist("train-labels-idx1-ubyte", "a25bea736e30d166cdddb491f175f624",
                                 60_008),
    "tinyshakespeare": DataFile(
        "tinyshakespeare",
        ("https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/"
         "input.txt",),
        "tinyshakespeare/input.txt",
        "sha256:86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
        False, 1_115_394),
    "cifar10": DataFile(
        "cifar10",
        ("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",),
        "cifar10/cifar-10-python.tar.gz",
        "md5:c58f30108f718f92721af3b95e74349a",
        False, 170_498_071),
}


#: The registry files shipped with the course (:data:`SHIPPED_DIR`): what the main path of the
#: 14 days needs. The others (the MNIST training set, CIFAR-10) are optional and downloaded.
SHIPPED = ("mnist-test-images", "mnist-test-labels", "tinyshakespeare")



class DatasetUnavailable(DatasetError):
    """A dataset is not cached, not mirrored, and could not be downloaded (offline?)."""


# --------------------------------------------------------------------------------------------
# Fetching
# --------------------------------------------------------------------------------------------

def cache_dir() -> Path:
    """The cache folder: ``$COURSE_CACHE_DIR``, else pooch's per-user cache for the course."""
    env = os.environ.get(CACHE_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    import pooch  # imported lazily: importing course.data stays cheap and offline

    return Path(pooch.os_cache("transformers-from-scratch"))


def _digest(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _matches(path: Path, checksum: str) -> bool:
    algorithm, _, expected = checksum.partition(":")
    return _digest(path, algorithm) == expected.lower()


def _install(source: Path, entry: DataFile, target: Path, compressed: bool, origin: str) -> Path:
    """Copy (gunzipping if needed) ``source`` to a temp file, verify it, then move it to target.

    Raises DatasetError (and leaves nothing behind) when the content is not the expected one.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            opener = gzip.open if compressed else open
            try:
                with opener(source, "rb") as src:
                    shutil.copyfileobj(src, out, 1 << 20)
            except (OSError, EOFError, gzip.BadGzipFile) as err:
                raise DatasetError(
                    f"{entry.dataset}: the copy from {origin} is corrupted or truncated "
                    f"({type(err).__name__}: {err}); it was not kept.") from err
        if not _matches(tmp, entry.checksum):
            raise DatasetError(
                f"{entry.dataset}: the copy from {origin} does not match its checksum "
                f"{entry.checksum} (corrupted or truncated; expected {entry.size:,} bytes, got "
                f"{tmp.stat().st_size:,}); it was not kept.")
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; the cache is ordinary readable data
        os.replace(tmp, target)
        return target
    finally:
        tmp.unlink(missing_ok=True)


def _download(entry: DataFile, url: str, target: Path, progressbar: bool) -> Path:
    import pooch

    downloads = target.parent / ".downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    fd, raw_name = tempfile.mkstemp(prefix=f".{Path(url).name}.", suffix=".part", dir=downloads)
    os.close(fd)
    raw = Path(raw_name)
    try:
        downloader = pooch.HTTPDownloader(progressbar=progressbar, timeout=60)
        downloader(url, str(raw), None)
        return _install(raw, entry, target, entry.gzip, url)
    finally:
        raw.unlink(missing_ok=True)


def fetch(name: str, *, base_url: str | None = None, progressbar: bool = True,
          offline: bool = False) -> Path:
    """Path of a verified local copy of registry file ``name`` (see :data:`REGISTRY`).

    Args:
        name: a key of :data:`REGISTRY`, e.g. ``"mnist-test-images"`` or ``"tinyshakespeare"``.
        base_url: download from ``base_url + mirror_path`` instead of the canonical URLs
            (a private mirror or a test server).
        progressbar: show pooch's tqdm progress bar while downloading.
        offline: never download: only the cache, the mirror and the shipped copy count (what a
            grading sandbox, which has no network, can see).

    Returns:
        The path of the verified (decompressed) file inside :func:`cache_dir`.

    Raises:
        KeyError: unknown name.
        DatasetError: the mirror copy or every download was corrupted or truncated.
        DatasetUnavailable: not cached, not mirrored, not shipped (or the shipped copy is
            damaged), and no URL could be reached (or ``offline``).
    """
    if name not in REGISTRY:
        raise KeyError(f"unknown dataset file {name!r}; known: {', '.join(REGISTRY)}")
    entry = REGISTRY[name]
    cache = cache_dir()
    target = cache / entry.dataset / entry.filename
    if target.is_file():
        if _matches(target, entry.checksum):
            return target
        target.unlink()  # a stale or damaged cache entry: fetch it again

    mirror = os.environ.get(MIRROR_ENV, "").strip()
    if mirror:
        root = Path(mirror).expanduser()
        candidates = [(root / entry.mirror_path, entry.gzip)]
        if entry.gzip:  # a mirror may also hold the file already decompressed
            candidates.append((root / entry.mirror_path[:-3], False))
        for path, compressed in candidates:
            if path.is_file():
                return _install(path, entry, target, compressed, f"the mirror {path}")

    errors: list[str] = []
    shipped = SHIPPED_DIR / entry.mirror_path
    if shipped.is_file():
        try:
            return _install(shipped, entry, target, entry.gzip,
                            f"the copy shipped with the course ({shipped})")
        except DatasetError as err:  # damaged: say so, and try the network
            errors.append(f"{err} Restore the shipped copy (`git checkout -- course/datasets` "
                          "in a checkout of the course, or reinstall the course)")

    urls = ((base_url.rstrip("/") + "/" + entry.mirror_path,) if base_url else entry.urls)
    downloads: list[str] = []
    for url in () if offline else urls:
        try:
            return _download(entry, url, target, progressbar)
        except DatasetError as err:
            downloads.append(str(err))
        except Exception as err:  # noqa: BLE001 - requests' connection/HTTP errors, timeouts, truncation
            downloads.append(f"{url}: {type(err).__name__}: {err}")
    corrupted = any("corrupted" in e or "checksum" in e for e in downloads)
    kind = DatasetError if corrupted else DatasetUnavailable
    errors += downloads
    tried = ([str(shipped)] if shipped.is_file() else []) + ([] if offline else list(urls))
    if offline:
        errors.append("not downloaded (offline)")
    raise kind(
        f"could not get the {entry.dataset!r} dataset file {entry.filename!r}.\n"
        f"  tried: {', '.join(tried) or 'nothing (offline, and no copy ships with the course)'}\n"
        f"  cache folder: {target.parent} (set {CACHE_ENV} to use another)\n"
        f"  errors: {'; '.join(errors)}\n"
        f"If this machine is offline, download {urls[0]} elsewhere and either put it at "
        f"<folder>/{entry.mirror_path} and set {MIRROR_ENV}=<folder>, or copy the "
        f"{'decompressed ' if entry.gzip else ''}file to {target}.")


# --------------------------------------------------------------------------------------------
# Loaders
# --------------------------------------------------------------------------------------------

def load_tinyshakespeare() -> str:
    """The Tiny Shakespeare corpus (karpathy/char-rnn ``input.txt``): 1,115,394 characters."""
    return fetch("tinyshakespeare").read_text(encoding="utf-8")



@dataclass(frozen=True)
class MNISTSplit:
    """MNIST images and labels in two parts.

    Attributes:
        train_images: uint8 tensor (N_train, 28, 28), 0 = background, 255 = ink.
        train_labels: int64 tensor (N_train,), digits 0-9.
        heldout_images: uint8 tensor (N_heldout, 28, 28), never used for training or for
            choosing normalization statistics.
        heldout_labels: int64 tensor (N_heldout,).
        name: ``"MNIST-10k"`` (8,000 / 2,000 from the official test set) or ``"MNIST"``
            (official 60,000 / 10,000).
    """

    train_images: torch.Tensor
    train_labels: torch.Tensor
    heldout_images: torch.Tensor
    heldout_labels: torch.Tensor
    name: str

    def __repr__(self) -> str:
        return (f"MNISTSplit({self.name}: train {tuple(self.train_images.shape)}, "
                f"held-out {tuple(self.heldout_images.shape)})")


def _mnist_pair(images: str, labels: str) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    x = torch.from_numpy(read_idx(fetch(images)))
    y = torch.from_numpy(read_idx(fetch(labels))).long()
    if x.dim() != 3 or y.dim() != 1 or x.shape[0] != y.shape[0]:
        raise DatasetError(f"{images}/{labels}: shapes {tuple(x.shape)} and {tuple(y.shape)} "
                           "do not make an image set")
    return x, y


def load_mnist(full: bool = False, *, seed: int = MNIST_SPLIT_SEED) -> MNISTSplit:
    """The course's MNIST split.

    Args:
        full: ``False`` (default): "MNIST-10k", the official 10,000-digit test set split with
            ``seed``, stratified by class, into 8,000 training and 2,000 held-out digits (two
            files, 1.6 MB). ``True``: the official 60,000 training / 10,000 test digits.
        seed: seed of the MNIST-10k split (keep the default to compare results).
    """
    test_x, test_y = _mnist_pair("mnist-test-images", "mnist-test-labels")
    if full:
        train_x, train_y = _mnist_pair("mnist-train-images", "mnist-train-labels")
        return MNISTSplit(train_x, train_y, test_x, test_y, "MNIST")
    train_idx, heldout_idx = stratified_split(test_y, MNIST_HELDOUT, seed)
    return MNISTSplit(test_x[train_idx], test_y[train_idx], test_x[heldout_idx],
                      test_y[heldout_idx], "MNIST-10k")


CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                   "ship", "truck")


@dataclass(frozen=True)
class CIFAR10Split:
    """CIFAR-10: uint8 images (N, 3, 32, 32), int64 labels (N,), official 50,000 / 10,000."""

    train_images: torch.Tensor
    train_labels: torch.Tensor
    heldout_images: torch.Tensor
    heldout_labels: torch.Tensor
    classes: tuple[str, ...] = CIFAR10_CLASSES



def load_cifar10(path: str | os.PathLike | None = None) -> CIFAR10Split:
    """CIFAR-10 from the official python tarball (downloads 163 MB unless cached or mirrored).

    ``path`` reads a given tarball instead (no checksum; used by tests).
    """
    archive = Path(path) if path is not None else fetch("cifar10")
    train = read_cifar_batches(archive, [f"data_batch_{i}" for i in range(1, 6)])
    test = read_cifar_batches(archive, ["test_batch"])
    return CIFAR10Split(train[0], train[1], test[0], test[1])
