"""Tests of course.data: fetching (mirror, cache, real HTTP downloads on loopback) and loaders."""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import io
import os
import pickle
import shutil
import socket
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from course import data

REPO = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get(data.MIRROR_ENV) or REPO.parent / "shared" / "data")
needs_mirror = pytest.mark.skipif(
    not (MIRROR / "mnist" / "t10k-labels-idx1-ubyte.gz").is_file(),
    reason=f"no data mirror at {MIRROR} (set {data.MIRROR_ENV})")
OFFICIAL_TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
SHIPPED_DIR = data.SHIPPED_DIR  # the copy shipped with the course (tests may hide it)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache folder, no mirror and no shipped copy, unless a test sets one."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(data.CACHE_ENV, str(folder))
    monkeypatch.delenv(data.MIRROR_ENV, raising=False)
    monkeypatch.setattr(data, "SHIPPED_DIR", tmp_path / "no-shipped-copy")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    return folder


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves a folder; under /short/ it promises more bytes than it sends, then hangs up."""

    def do_GET(self):  # noqa: N802 (http.server's naming)
        if self.path.startswith("/short/"):
            body = (Path(self.directory) / self.path[len("/short/"):]).read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        super().do_GET()

    def log_message(self, *args):  # keep pytest output clean
        pass


@pytest.fixture
def server(tmp_path):
    """An HTTP server on 127.0.0.1 serving tmp_path/www; yields (base_url, folder)."""
    www = tmp_path / "www"
    www.mkdir()
    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Handler, directory=str(www)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", www
    httpd.shutdown()
    httpd.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _leftovers(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def _idx_bytes(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(
        int(n).to_bytes(4, "big") for n in array.shape)
    return header + array.astype(np.uint8).tobytes()


def _register(monkeypatch, name: str, dataset: str, mirror_path: str, content: bytes,
              compressed: bool) -> None:
    """Point registry entry `name` at a synthetic file (checksum of its decompressed content)."""
    entry = data.DataFile(dataset, ("http://127.0.0.1:9/unused",), mirror_path,
                          "sha256:" + hashlib.sha256(content).hexdigest(), compressed,
                          len(content))
    monkeypatch.setitem(data.REGISTRY, name, entry)


# ---------------------------------------------------------------------------------------------

def test_does_importing_the_module_stay_off_the_network(fresh_python):
    """Does `import course.data` open no socket (checked in a fresh interpreter)?"""
    code = ("import socket\n"
            "def refuse(*a, **k):\n"
            "    raise AssertionError('course.data touched the network at import time')\n"
            "socket.socket.connect = socket.socket.connect_ex = refuse\n"
            "socket.create_connection = socket.getaddrinfo = refuse\n"
            "import course.data\n")
    done = fresh_python(code, timeout=60)
    assert done.returncode == 0, done.stderr


def test_is_every_registry_entry_complete():
    """Does every registry entry name a dataset, an https/http URL, a mirror path and a hash?"""
    assert {"mnist-test-images", "mnist-test-labels", "mnist-train-images",
            "mnist-train-labels", "tinyshakespeare", "cifar10"} <= set(data.REGISTRY)
    for name, entry in data.REGISTRY.items():
        assert entry.urls and all(u.startswith(("https://", "http://")) for u in entry.urls), name
        assert entry.mirror_path.startswith(entry.dataset + "/"), name
        algorithm, _, digest = entry.checksum.partition(":")
        assert algorithm in {"md5", "sha256"} and len(digest) in {32, 64}, name
    assert data.REGISTRY["tinyshakespeare"].urls[0].endswith(
        "karpathy/char-rnn/master/data/tinyshakespeare/input.txt")


def test_does_fetch_reject_an_unknown_name(cache):
    """Does fetch name the known datasets when asked for an unknown one?"""
    with pytest.raises(KeyError, match="mnist-test-images"):
        data.fetch("imagenet")


def test_is_the_cache_folder_pooch_default_without_the_env_var(monkeypatch):
    """Without COURSE_CACHE_DIR, is the cache pooch's per-user folder for the course?"""
    import pooch

    monkeypatch.delenv(data.CACHE_ENV, raising=False)
    assert data.cache_dir() == Path(pooch.os_cache("transformers-from-scratch"))


@needs_mirror
def test_does_the_mirror_feed_the_cache_with_verified_content(cache, monkeypatch):
    """With COURSE_DATA_DIR set, are the mirror's recompressed files accepted and cached?"""
    monkeypatch.setenv(data.MIRROR_ENV, str(MIRROR))
    path = data.fetch("mnist-test-labels")
    assert path == cache / "mnist" / "t10k-labels-idx1-ubyte"
    assert hashlib.md5(path.read_bytes()).hexdigest() == "27ae3e4e09519cfbb04c329615203637"
    text = data.load_tinyshakespeare()
    assert len(text) == 1_115_394 and len(set(text)) == 65
    # Second call: served from the cache even with the mirror gone.
    monkeypatch.setenv(data.MIRROR_ENV, str(cache / "nowhere"))
    assert data.fetch("mnist-test-labels") == path


@needs_mirror
def test_is_a_damaged_cache_file_replaced(cache, monkeypatch):
    """Is a cached file whose checksum no longer matches fetched again?"""
    monkeypatch.setenv(data.MIRROR_ENV, str(MIRROR))
    target = cache / "mnist" / "t10k-labels-idx1-ubyte"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"not the labels")
    path = data.fetch("mnist-test-labels")
    assert hashlib.md5(path.read_bytes()).hexdigest() == "27ae3e4e09519cfbb04c329615203637"


def test_is_a_corrupt_mirror_file_rejected_and_not_cached(cache, tmp_path, monkeypatch):
    """Does a mirror copy with the wrong content raise DatasetError and leave no file behind?"""
    mirror = tmp_path / "mirror"
    (mirror / "mnist").mkdir(parents=True)
    (mirror / "mnist" / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(b"\0" * 10_008))
    monkeypatch.setenv(data.MIRROR_ENV, str(mirror))
    with pytest.raises(data.DatasetError, match="does not match its checksum"):
        data.fetch("mnist-test-labels")
    assert _leftovers(cache) == []


@needs_mirror
def test_does_a_real_http_download_work(cache, server):
    """Does fetch download over HTTP (pooch, progress bar), gunzip and verify the content?"""
    base, www = server
    shutil.copytree(MIRROR / "mnist", www / "mnist")
    path = data.fetch("mnist-test-labels", base_url=base, progressbar=True)
    assert hashlib.md5(path.read_bytes()).hexdigest() == "27ae3e4e09519cfbb04c329615203637"
    assert _leftovers(cache) == [path]  # no partial or compressed files left over


def _flip_one_label(blob: bytes) -> bytes:
    raw = bytearray(gzip.decompress(blob))
    raw[100] ^= 0xFF  # one flipped label byte: valid gzip, wrong content
    return gzip.compress(bytes(raw))


def _cut_in_half(blob: bytes) -> bytes:
    return blob[: len(blob) // 2]  # a valid HTTP reply whose gzip stream stops midway


@needs_mirror
@pytest.mark.parametrize("damage, message", [(_flip_one_label, "checksum"),
                                             (_cut_in_half, "corrupted or truncated")],
                         ids=["wrong content", "truncated gzip"])
def test_is_a_damaged_download_rejected_and_removed(cache, server, damage, message):
    """Does a download with wrong content, or a gzip cut in half, raise and leave nothing?"""
    base, www = server
    blob = (MIRROR / "mnist" / "t10k-labels-idx1-ubyte.gz").read_bytes()
    (www / "mnist").mkdir()
    (www / "mnist" / "t10k-labels-idx1-ubyte.gz").write_bytes(damage(blob))
    with pytest.raises(data.DatasetError, match=message):
        data.fetch("mnist-test-labels", base_url=base, progressbar=False)
    assert _leftovers(cache) == []


@needs_mirror
def test_is_a_connection_cut_mid_download_rejected(cache, server):
    """When the server hangs up before Content-Length bytes, is the partial file discarded?"""
    base, www = server
    (www / "tinyshakespeare").mkdir()
    shutil.copy(MIRROR / "tinyshakespeare" / "input.txt", www / "tinyshakespeare" / "input.txt")
    with pytest.raises(data.DatasetError) as info:
        data.fetch("tinyshakespeare", base_url=base + "/short", progressbar=False)
    assert "IncompleteRead" in str(info.value) or "ChunkedEncodingError" in str(info.value)
    assert _leftovers(cache) == []


def test_does_offline_and_uncached_raise_a_helpful_error(cache):
    """Offline: does the error name the dataset, the URL, the cache folder and the env var?"""
    base = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(data.DatasetUnavailable) as info:
        data.fetch("tinyshakespeare", base_url=base, progressbar=False)
    message = str(info.value)
    for needle in ("tinyshakespeare", f"{base}/tinyshakespeare/input.txt", str(cache),
                   data.MIRROR_ENV, data.CACHE_ENV):
        assert needle in message
    assert _leftovers(cache) == []


def test_does_a_missing_file_on_the_server_count_as_unavailable(cache, server):
    """Does an HTTP 404 raise DatasetUnavailable naming the URL?"""
    base, _ = server
    with pytest.raises(data.DatasetUnavailable, match="404"):
        data.fetch("mnist-test-images", base_url=base, progressbar=False)


# ---------------------------------------------------------------------------------------------
# The copy shipped with the course (course/datasets/)

def test_do_the_shipped_files_match_the_registry_and_say_where_they_come_from():
    """Is each shipped file the registry's content (checksum of the decompressed bytes), and
    does the README beside them give its checksum, source, attribution and licence?"""
    readme = (SHIPPED_DIR / "README.md").read_text(encoding="utf-8")
    for name in data.SHIPPED:
        entry = data.REGISTRY[name]
        path = SHIPPED_DIR / entry.mirror_path
        raw = gzip.decompress(path.read_bytes()) if entry.gzip else path.read_bytes()
        algorithm, _, digest = entry.checksum.partition(":")
        assert hashlib.new(algorithm, raw).hexdigest() == digest, name
        assert len(raw) == entry.size and digest in readme and entry.mirror_path in readme
    for needle in ("LeCun", "Cortes", "Burges", "CC BY-SA 3.0", "public domain",
                   "karpathy/char-rnn"):
        assert needle in readme
    assert {p.relative_to(SHIPPED_DIR).as_posix() for p in SHIPPED_DIR.rglob("*")
            if p.is_file()} == {"README.md"} | {data.REGISTRY[n].mirror_path
                                                for n in data.SHIPPED}


def test_do_both_datasets_load_offline_from_the_shipped_copy(cache, no_network, monkeypatch):
    """No network, an empty cache, no COURSE_DATA_DIR: do MNIST-10k and Tiny Shakespeare load
    from the copy shipped with the course, verified, and is CIFAR-10 still said unavailable?"""
    monkeypatch.setattr(data, "SHIPPED_DIR", SHIPPED_DIR)
    split = data.load_mnist()
    assert split.name == "MNIST-10k" and split.train_images.shape == (8_000, 28, 28)
    counts = torch.bincount(split.train_labels, minlength=10) + torch.bincount(
        split.heldout_labels, minlength=10)
    assert counts.tolist() == OFFICIAL_TEST_COUNTS
    text = data.load_tinyshakespeare()
    assert len(text) == 1_115_394 and len(set(text)) == 65
    assert data.fetch("mnist-test-labels", offline=True) == (
        cache / "mnist" / "t10k-labels-idx1-ubyte")
    with pytest.raises(data.DatasetUnavailable, match="cifar10"):
        data.fetch("cifar10", progressbar=False)


@pytest.mark.parametrize("damage, words", [(_flip_one_label, "does not match its checksum"),
                                           (_cut_in_half, "corrupted or truncated")],
                         ids=["wrong content", "truncated gzip"])
@pytest.mark.parametrize("offline", [False, True], ids=["network down", "offline"])
def test_is_a_damaged_shipped_copy_rejected_clearly(cache, tmp_path, monkeypatch, damage, words,
                                                   offline):
    """Is a damaged shipped file refused (DatasetUnavailable when nothing else has a copy),
    named with the fix, and never left in the cache?"""
    shipped = tmp_path / "shipped"
    shutil.copytree(SHIPPED_DIR, shipped)
    labels = shipped / "mnist" / "t10k-labels-idx1-ubyte.gz"
    labels.write_bytes(damage(labels.read_bytes()))
    monkeypatch.setattr(data, "SHIPPED_DIR", shipped)
    base = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    with pytest.raises(data.DatasetUnavailable) as info:
        data.fetch("mnist-test-labels", base_url=base, progressbar=False, offline=offline)
    message = str(info.value)
    for needle in (str(labels), words, "git checkout -- course/datasets", data.MIRROR_ENV):
        assert needle in message
    tried = next(line for line in message.splitlines() if "tried:" in line)
    assert str(labels) in tried and (f"{base}/mnist/" in tried) is not offline
    assert _leftovers(cache) == []
    # the other shipped files still load
    assert data.fetch("mnist-test-images", offline=True).is_file()


# ---------------------------------------------------------------------------------------------

def test_does_read_idx_read_synthetic_files(tmp_path):
    """Does read_idx read raw and gzipped IDX files with the right shape and values?"""
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    (tmp_path / "x.idx").write_bytes(_idx_bytes(images))
    (tmp_path / "x.idx.gz").write_bytes(gzip.compress(_idx_bytes(images)))
    for name in ("x.idx", "x.idx.gz"):
        out = data.read_idx(tmp_path / name)
        assert out.dtype == np.uint8 and out.shape == (2, 3, 4)
        np.testing.assert_array_equal(out, images)


def test_does_read_idx_reject_malformed_files(tmp_path):
    """Are a bad magic number and a size that disagrees with the header rejected?"""
    (tmp_path / "magic").write_bytes(b"PK\x03\x04" + b"\0" * 20)
    with pytest.raises(data.DatasetError, match="magic"):
        data.read_idx(tmp_path / "magic")
    good = _idx_bytes(np.zeros((3, 5), dtype=np.uint8))
    (tmp_path / "short").write_bytes(good[:-1])
    with pytest.raises(data.DatasetError, match="bytes"):
        data.read_idx(tmp_path / "short")


def test_is_the_split_stratified_exact_and_deterministic():
    """Does stratified_split keep class proportions, the exact size, and a fixed draw?"""
    labels = torch.repeat_interleave(torch.arange(10), torch.tensor(OFFICIAL_TEST_COUNTS))
    train, held = data.stratified_split(labels, 2_000, seed=0)
    assert train.numel() == 8_000 and held.numel() == 2_000
    assert set(train.tolist()).isdisjoint(held.tolist())
    assert torch.equal(torch.sort(torch.cat([train, held])).values, torch.arange(10_000))
    per_class = torch.bincount(labels[held], minlength=10)
    expected = torch.tensor(OFFICIAL_TEST_COUNTS) * 0.2
    assert (per_class - expected).abs().max() <= 1
    again, _ = data.stratified_split(labels, 2_000, seed=0)
    other, _ = data.stratified_split(labels, 2_000, seed=1)
    assert torch.equal(train, again) and not torch.equal(train, other)


@needs_mirror
def test_is_mnist_10k_the_documented_split(cache, monkeypatch):
    """Is the default MNIST-10k split 8,000 / 2,000 uint8 digits, stratified by class?"""
    monkeypatch.setenv(data.MIRROR_ENV, str(MIRROR))
    split = data.load_mnist()
    assert split.name == "MNIST-10k"
    assert split.train_images.shape == (8_000, 28, 28)
    assert split.heldout_images.shape == (2_000, 28, 28)
    assert split.train_images.dtype == torch.uint8 and split.train_labels.dtype == torch.int64
    counts = torch.bincount(split.train_labels, minlength=10) + torch.bincount(
        split.heldout_labels, minlength=10)
    assert counts.tolist() == OFFICIAL_TEST_COUNTS
    held = torch.bincount(split.heldout_labels, minlength=10).double()
    assert (held - torch.tensor(OFFICIAL_TEST_COUNTS) * 0.2).abs().max() <= 1
    assert torch.equal(split.heldout_labels, data.load_mnist().heldout_labels)


def test_does_load_mnist_full_download_the_official_sets(cache, server, monkeypatch):
    """With full=True, are the (synthetic) 60k-style train files downloaded, verified, read?"""
    base, www = server
    gen = np.random.default_rng(0)
    files = {
        "mnist-train-images": gen.integers(0, 256, (12, 28, 28)),
        "mnist-train-labels": np.arange(12) % 10,
        "mnist-test-images": gen.integers(0, 256, (6, 28, 28)),
        "mnist-test-labels": np.arange(6) % 10,
    }
    (www / "mnist").mkdir()
    for name, array in files.items():
        raw = _idx_bytes(array)
        _register(monkeypatch, name, "mnist", f"mnist/{name}.gz", raw, True)
        (www / "mnist" / f"{name}.gz").write_bytes(gzip.compress(raw))
        data.fetch(name, base_url=base, progressbar=False)  # downloads into the cache
    split = data.load_mnist(full=True)
    assert split.name == "MNIST"
    assert split.train_images.shape == (12, 28, 28) and split.heldout_images.shape == (6, 28, 28)
    np.testing.assert_array_equal(split.train_images.numpy(), files["mnist-train-images"])
    assert split.train_labels.dtype == torch.int64


def _cifar_tarball(path: Path, per_batch: int = 4) -> None:
    gen = np.random.default_rng(1)
    with tarfile.open(path, "w:gz") as tar:
        for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
            batch = {b"data": gen.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
                     b"labels": list(range(per_batch))}
            blob = pickle.dumps(batch)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))


def test_does_load_cifar10_read_a_synthetic_tarball(cache, server, monkeypatch):
    """Does a CIFAR-format tarball, downloaded and verified, load as (N, 3, 32, 32) uint8?"""
    base, www = server
    (www / "cifar10").mkdir()
    archive = www / "cifar10" / "cifar-10-python.tar.gz"
    _cifar_tarball(archive)
    _register(monkeypatch, "cifar10", "cifar10", "cifar10/cifar-10-python.tar.gz",
              archive.read_bytes(), False)
    data.fetch("cifar10", base_url=base, progressbar=False)
    split = data.load_cifar10()
    assert split.train_images.shape == (20, 3, 32, 32) and split.heldout_images.shape == (
        4, 3, 32, 32)
    assert split.train_images.dtype == torch.uint8 and split.train_labels.dtype == torch.int64
    assert len(split.classes) == 10


def test_does_load_cifar10_reject_an_archive_without_batches(tmp_path):
    """Does a tarball missing the CIFAR batches raise DatasetError naming the batch?"""
    path = tmp_path / "empty.tar.gz"
    with tarfile.open(path, "w:gz"):
        pass
    with pytest.raises(data.DatasetError, match="data_batch_1"):
        data.load_cifar10(path)
