"""Small helpers the rules share."""

from __future__ import annotations


def us(v: float) -> str:
    """A duration for a message: µs below 1 ms, ms above."""
    if abs(v) >= 1000:
        return f"{v / 1000:.2f} ms"
    return f"{v:.1f} µs"


def ms(v: float) -> str:
    """A duration for a job's summary: whole µs below 1 ms, ms above."""
    return f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.0f} µs"


def size(nbytes: float) -> str:
    """Bytes for a message: B, KiB, MiB or GiB, whichever keeps the number readable."""
    a = abs(nbytes)
    if a >= 1024**3:
        return f"{nbytes / 1024**3:.2f} GiB"
    if a >= 1024**2:
        return f"{nbytes / 1024**2:.1f} MiB"
    if a >= 1024:
        return f"{nbytes / 1024:.1f} KiB"
    return f"{nbytes:.0f} B"


mib = size  # the name the rules used when everything was in MiB


_IRREGULAR = {"copy": "copies", "gap": "gaps", "is": "are", "was": "were", "this": "these"}


def plural(n: float, word: str, many: str | None = None) -> str:
    """``1 launch``, ``2 launches``, ``3 copies``: the count (a float shown rounded) and the word
    in the number it shows."""
    shown = f"{n:.0f}" if isinstance(n, float) else str(n)
    if shown in ("1", "-1"):
        return f"{shown} {word}"
    if many is None:
        many = _IRREGULAR.get(word) or (
            word + "es"
            if word.endswith(("s", "sh", "ch", "x", "z"))
            else word[:-1] + "ies"
            if word.endswith("y") and word[-2:-1] not in "aeiou"
            else word + "s"
        )
    return f"{shown} {many}"


def pct(v: float) -> str:
    return f"{v:.1f}%"


def median(xs) -> float:
    """The median, as ``statistics.median`` gives it (the mean of the middle two of an even count),
    0.0 of none. Not the stdlib's: ``statistics`` (with random and fractions) was 3% of a small
    trace's `profd-client analyze`, for these three lines."""
    s = sorted(xs)
    if not s:
        return 0.0
    k = len(s) // 2
    return s[k] if len(s) % 2 else (s[k - 1] + s[k]) / 2


def quantile(xs: list[float], q: float) -> float:
    """Nearest-rank quantile of a non-empty list."""
    s = sorted(xs)
    k = min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))
    return s[k]


def r3(v: float, nd: int = 3) -> float:
    """A number for a report's evidence or summary, to ``nd`` decimals and always a float (a
    median of counts is an int, and the JSON would say ``5`` where the same field elsewhere says
    ``5.0``)."""
    return round(float(v), nd)


def inputs(e) -> tuple[list, list[str]]:
    """An op's ``record_shapes`` inputs, position by position: each a list of non-negative ints
    (a tensor's shape; ``[]`` for a scalar or an input that is not a tensor) and the dtype names.

    Foreign or corrupt traces put anything there (null, scalars, strings, nested nulls): whatever
    is not a list of non-negative ints becomes ``None`` rather than being trusted.

    A step runs the same ops on the same shapes again and again: each distinct (dims, types) text
    is decoded and checked once (``_INPUTS``), and every caller gets lists of its own.
    """
    a = e.args
    if a is None:
        return [], []
    key = input_key(e)
    if key is None:  # not bytes-like: decoded every time
        return _decode_inputs(a.input_dims, a.input_types)
    got = _INPUTS.get(key)
    if got is None:
        if len(_INPUTS) >= _INPUTS_MAX:  # bounded: a daemon analyses trace after trace
            _INPUTS.clear()
        got = _INPUTS[key] = _decode_inputs(*key)
    dims, names = got
    return [d[:] if d is not None else None for d in dims], names[:]


# Ops whose Input Dims give a GEMM's (M, K) x (K, N): the shapes small-problem and misaligned-dims
# read (Context.op_input_keys, made once for both).
GEMM_OPS = frozenset(
    {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear"}
)


def input_key(e) -> tuple[bytes, bytes] | None:
    """What ``inputs`` decodes an op's inputs from: its dims' and types' texts as bytes (a key that
    holds no reference into the document's buffer); None without args or when they are not
    bytes-like. A rule that derives something of the inputs alone derives it once per key."""
    a = e.args
    if a is None:
        return None
    try:
        return (bytes(a.input_dims or b""), bytes(a.input_types or b""))
    except TypeError:
        return None


def per_inputs(e, seen: dict, derive):
    """``derive(e)``, worked out once per op name and inputs (``input_key``) and kept in ``seen``: a
    step runs the same ops on the same shapes. An op whose inputs give no key is derived alone."""
    inputs_key = input_key(e)
    if inputs_key is None:
        return derive(e)
    key = (e.name, inputs_key)
    if key not in seen:
        seen[key] = derive(e)
    return seen[key]


_INPUTS: dict[tuple, tuple[list, list[str]]] = {}
_INPUTS_MAX = 8192


def _decode_inputs(input_dims, input_types) -> tuple[list, list[str]]:
    import msgspec

    try:
        dims = msgspec.json.decode(input_dims) if input_dims else []
        types = msgspec.json.decode(input_types) if input_types else []
    except (msgspec.DecodeError, RecursionError):
        return [], []
    out = [
        d
        if isinstance(d, list)
        and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1 << 40 for x in d)
        else None
        for d in (dims if isinstance(dims, list) else [])
    ]
    names = [t for t in (types if isinstance(types, list) else []) if isinstance(t, str)]
    return out, names


def shapes(e) -> tuple[list[list[int]], list[str]]:
    """An op's ``record_shapes`` inputs that are matrices (rank >= 2), and the dtype names."""
    dims, names = inputs(e)
    return [d for d in dims if d is not None and len(d) >= 2], names
