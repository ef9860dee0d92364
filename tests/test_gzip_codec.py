"""The gzip codecs agree: ISA-L's inflate (python-isal, the fast path loader._inflate takes where it
is installed) against zlib's (the fallback, and the reference) on every shipped gzipped trace, as
they come, concatenated and damaged: the same bytes, or the same kind of error.

The damaged files are the shipped traces cut short or with bytes flipped; the concatenated ones two
shipped traces joined (gzip members one after another, as `cat a.gz b.gz` makes them).
"""

import glob
import os
import zlib

import pytest

from conftest import EXAMPLES
from profd.server.engine import loader
from profd.server.engine.loader import TraceError

isal_zlib = pytest.importorskip("isal.isal_zlib")

TRACES = sorted(glob.glob(os.path.join(EXAMPLES, "**", "*.gz"), recursive=True))
ZLIB = (zlib, (zlib.error,))
ISAL = (isal_zlib, (zlib.error, isal_zlib.error))


def _inflate(monkeypatch, codec, data: bytes, chunk: int = 64 << 10):
    """loader._inflate of ``data`` (fed in ``chunk``-byte pieces) with ``codec``: the bytes, or the
    TraceError's words."""
    monkeypatch.setattr(loader, "_gzip_codec", codec[0])
    monkeypatch.setattr(loader, "_GZIP_ERRORS", codec[1])
    pieces = (data[k : k + chunk] for k in range(0, len(data), chunk))
    try:
        return b"".join(loader._inflate("t.json.gz", pieces))
    except TraceError as e:
        return e.what


def _both(monkeypatch, data: bytes):
    return _inflate(monkeypatch, ZLIB, data), _inflate(monkeypatch, ISAL, data)


def test_isal_is_the_codec_where_installed():
    assert loader._gzip_codec is isal_zlib


@pytest.mark.parametrize("path", TRACES, ids=lambda p: os.path.relpath(p, EXAMPLES))
def test_same_bytes_on_every_shipped_trace(monkeypatch, path):
    data = open(path, "rb").read()
    ref, fast = _both(monkeypatch, data)
    assert isinstance(ref, bytes) and len(ref) > 0
    assert fast == ref


def test_concatenated_members(monkeypatch):
    a, b = (open(p, "rb").read() for p in TRACES[:2])
    ref, fast = _both(monkeypatch, a + b)
    assert isinstance(ref, bytes) and fast == ref
    assert ref == _inflate(monkeypatch, ZLIB, a) + _inflate(monkeypatch, ZLIB, b)


@pytest.mark.parametrize("frac", [0.0005, 0.3, 0.9, 0.9999])
def test_cut_short(monkeypatch, frac):
    data = open(TRACES[0], "rb").read()
    ref, fast = _both(monkeypatch, data[: max(3, int(len(data) * frac))])
    assert isinstance(ref, str) and "gzip" in ref
    assert isinstance(fast, str) and "gzip" in fast


@pytest.mark.parametrize("where", [0.2, 0.6, -6, -2])  # the deflate body; the CRC; the length
def test_flipped_bytes(monkeypatch, where):
    data = bytearray(open(TRACES[0], "rb").read())
    k = int(len(data) * where) if where > 0 else len(data) + where
    data[k] ^= 0x5A
    ref, fast = _both(monkeypatch, bytes(data))
    # a flip inside the body may still inflate to other bytes, until the CRC says no: both then
    # refuse the file
    assert isinstance(ref, str) and "gzip" in ref, ref if isinstance(ref, str) else len(ref)
    assert isinstance(fast, str) and "gzip" in fast
