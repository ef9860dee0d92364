"""Fuzzing the loader and the engine (issue 7): any exception other than TraceError is a bug.

Two generators, both seeded by a small real trace (examples/seed_n1024_bf16_nostack, with the
frames of seed_n64_bf16 mixed in so the stack paths are exercised, and events of the peer ROCm and
2021-era traces in examples/peer so their formats are too):
- structured: the real events with random fields replaced by values of the right and wrong types,
  plus generated events (every phase/category the model reads), written as JSON;
- bytes: the real trace's bytes mutated (flips, cuts, splices, insertions), sometimes gzipped.

CI runs a fixed, small number of examples (PROFD_FUZZ_EXAMPLES overrides it for a campaign;
PROFD_FUZZ_BASE=<example name> fuzzes around another real trace, e.g. mlp_eager):

    PROFD_FUZZ_EXAMPLES=12000 .venv/bin/python -m pytest -q --hypothesis-show-statistics tests/test_fuzz.py

A rule that raises is caught by the engine (logged, the report goes on without it); the fuzzer also
counts that as a bug, through the ``profd.engine`` log.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
import tempfile

import msgspec
import orjson
import hypothesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import trace
from profd.server.engine import Options, analyze_file
from profd.server.engine.loader import TraceError

EXAMPLES = int(os.environ.get("PROFD_FUZZ_EXAMPLES", "300"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize="PROFD_FUZZ_EXAMPLES" not in os.environ,
    suppress_health_check=list(HealthCheck),
    database=None,
)


def _base() -> dict:
    if os.environ.get("PROFD_FUZZ_BASE"):  # e.g. mlp_eager: training rules (fwd/bwd, memory, optimizer)
        return orjson.loads(gzip.decompress(open(trace(os.environ["PROFD_FUZZ_BASE"]), "rb").read()))
    d = orjson.loads(gzip.decompress(open(trace("seed_n1024_bf16_nostack"), "rb").read()))
    stack = orjson.loads(gzip.decompress(open(trace("seed_n64_bf16"), "rb").read()))
    frames = [e for e in stack["traceEvents"] if e.get("cat") == "python_function"][:40]
    # and other producers' events: ROCm's (HIP calls, string numbers) and the 2021 profiler's
    # (Operator/Runtime/Kernel/Memcpy/Memset, "tid": "stream 7", [memory] with only Bytes)
    amd = orjson.loads(gzip.decompress(open(PEER_AMD, "rb").read()))["traceEvents"]
    d["traceEvents"] = d["traceEvents"] + frames + [e for e in amd if e.get("ph") == "X"][:40] + PEER_2021
    return d


PEER = os.path.join(os.path.dirname(__file__), "..", "examples", "peer")
PEER_AMD = os.path.join(PEER, "hta", "amd_trace", "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
# The first ProfilerStep of a 2021 tb_plugin sample: its ops, runtime calls, GPU work and
# allocator samples (the whole file is 35 MB; these few hundred events carry every shape it has).
PEER_2021 = [
    e
    for e in orjson.loads(
        gzip.decompress(
            open(
                os.path.join(
                    PEER,
                    "kineto",
                    "tb_plugin",
                    "samples",
                    "resnet50_num_workers_0",
                    "worker0.1623143566756.pt.trace.json.gz",
                ),
                "rb",
            ).read()
        )
    )["traceEvents"][:400]
]


BASE = _base()
BASE_EVENTS = BASE["traceEvents"]
BASE_BYTES = orjson.dumps(BASE)

_bad = logging.getLogger("profd.engine")

# Rules with a known crash, reproduced minimally (xfail) in tests/test_bad_input.py; skipped here so
# a campaign goes on to find new ones. Remove a code once its xfail test passes.
KNOWN_RULE_BUGS: set = set()  # odd 'Input Dims' / 'Input type' values


class _RuleErrors(logging.Handler):
    def __init__(self):
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


def _event(what: str) -> None:
    if hypothesis.currently_in_test_context():
        hypothesis.event(what)


def check(data: bytes, suffix: str = ".json") -> None:
    """Analyse ``data`` as a trace file: a Report or a TraceError naming the file; nothing else."""
    fd, path = tempfile.mkstemp(suffix=suffix, prefix="profd-fuzz-")
    handler = _RuleErrors()
    _bad.addHandler(handler)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        try:
            rep = analyze_file(path, Options())
        except TraceError as e:
            assert str(e).startswith(f"profd: bad trace {path}: "), str(e)
            assert "\n" not in str(e)
            _event("TraceError")
            return
        _event("report")
        assert rep.error is None and rep.summary is not None
        msgspec.json.encode(rep)  # the report serialises (the daemon stores and sends it)
        records = [
            r
            for r in handler.records
            if not any(f"rule {c} failed" in r.getMessage() for c in KNOWN_RULE_BUGS)
        ]
        if records:
            r = records[0]
            raise AssertionError(f"rule raised: {r.getMessage()}\n{r.exc_text or ''}")
    finally:
        _bad.removeHandler(handler)
        os.unlink(path)


# ---- structured --------------------------------------------------------------------------------
KEYS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "bp", "args")
ARG_KEYS = (
    "External id",
    "correlation",
    "Python id",
    "Python parent id",
    "Sequence number",
    "Fwd thread id",
    "Input Dims",
    "Input type",
    "Bytes",
    "Total Allocated",
    "Total Reserved",
    "Device Type",
    "Device Id",
    "bytes",
    "stream",
    "device",
    "grid",
    "block",
    "name",
    "CallFrom",
)

numbers = st.one_of(
    st.integers(-10, 10),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(-1e6, 1e6),
    st.sampled_from([0, 0.0, -0.0, 1e308, -1e308, 5e-324, 2**53 + 1]),
)
names = st.one_of(
    st.sampled_from(
        [
            "ProfilerStep#1",
            "ProfilerStep#0",
            "ProfilerStep#",
            "ProfilerStep#-3",
            "train.py(12): step",
            "x.py(0): <module>",
            "torch/nn/modules/module.py(1): f",
            "(): ",
            "aten::mm",
            "aten::addmm",
            "aten::item",
            "aten::_local_scalar_dense",
            "aten::copy_",
            "cudaLaunchKernel",
            "cudaDeviceSynchronize",
            "cudaStreamSynchronize",
            "cudaMemcpyAsync",
            "[memory]",
            "thread_name",
            "process_name",
            "Optimizer.step#SGD.step",
            "ampere_sgemm_128x64_nn",
            "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT",
            "void at::native::vectorized_elementwise_kernel<4>(...)",
            "Memcpy DtoH (Device -> Pageable)",
            "Activity Buffer Request",
            "autograd::engine::evaluate_function: MmBackward0",
            "CompiledFunction",
            "Torch-Compiled Region: 0/0",
            "ncclKernel_AllReduce",
            "hipLaunchKernel",
            "hipExtModuleLaunchKernel",
            "hipMemcpyWithStream",
            "hipDeviceSynchronize",
            "Cijk_Ailk_Bljk_SB_MT64x16x32_MI16x16x1",
            "Memset (Device)",
            "Memcpy HtoD (Pageable -> Device)",
            "CudnnConvolutionBackward",
            "",
            # lone surrogates (issue 17.4): json writes them as \ud800 escapes
            "x\ud800",
            "\udc00",
            "\ud83d\ude00",
            "a\udfff\U0001f600",
            "n" * 70000,
        ]
    ),  # past the scanner's intern limit (64 KB): not interned
    st.text(max_size=30),
)
ids = st.one_of(
    st.none(),
    st.integers(-5, 50),
    st.integers(-(2**63), 2**63 - 1),
    st.text(max_size=5),
    st.sampled_from(["stream 7", "25738", "0x0", "007", "-1"]),
)
# numbers as roctracer writes some of them: a string holding a number (or not quite one)
numeric_strings = st.one_of(
    numbers.map(lambda v: json.dumps(v)),
    st.sampled_from(["256", "-0", "1e3", "2.5", "007", " 1", "nan", "inf", "1e400", "", "0x10"]),
)
anything = st.recursive(
    st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=10)),
    lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.text(max_size=5), c, max_size=3)),
    max_leaves=6,
)


ID_ARG_KEYS = {
    "External id",
    "correlation",
    "Python id",
    "Python parent id",
    "Sequence number",
    "Fwd thread id",
    "Device Type",
    "Device Id",
    "stream",
    "device",
}
NUM_ARG_KEYS = {"Bytes", "Total Allocated", "Total Reserved", "bytes"}
RAW_ARG_KEYS = {"Input Dims", "Input type", "grid", "block"}
dims = st.lists(st.lists(st.integers(-(2**31), 2**31), max_size=4), max_size=4)


def arg_value(key: str, typed: bool):
    """A value for args[key]: of a type the loader accepts when ``typed``, else anything."""
    if key in ID_ARG_KEYS:
        right = ids
    elif key in NUM_ARG_KEYS:
        right = st.one_of(st.none(), numbers, numeric_strings)
    elif key in RAW_ARG_KEYS:  # kept raw: any JSON is accepted, decoded later by the rules
        right = st.one_of(
            dims, st.lists(st.sampled_from(["float", "c10::BFloat16", "int", ""]), max_size=4), anything
        )
    else:
        right = st.one_of(st.none(), names)
    return right if typed else st.one_of(right, right, anything)


def value_for(key: str, typed: bool = False):
    right = {
        "ph": st.sampled_from(["X", "i", "I", "s", "f", "t", "M", "B", "E", "C", ""]),
        "cat": st.sampled_from(
            [
                "cpu_op",
                "user_annotation",
                "python_function",
                "cuda_runtime",
                "cuda_driver",
                "kernel",
                "gpu_memcpy",
                "gpu_memset",
                "gpu_user_annotation",
                "ac2g",
                "fwdbwd",
                "cpu_instant_event",
                "Trace",
                "Operator",
                "Runtime",
                "Kernel",
                "Memcpy",
                "Memset",
                "cuda_sync",
                "mtia_runtime",
                "mtia_ccp_events",
                "overhead",
                "",
            ]
        ),
        "name": names,
        "pid": ids,
        "tid": ids,
        "id": ids,
        "ts": st.one_of(numbers, numbers, numeric_strings),
        "dur": st.one_of(numbers, numbers, numeric_strings),
        "bp": st.sampled_from(["e", "s", ""]),
        "args": st.sampled_from(ARG_KEYS).flatmap(
            lambda k: st.dictionaries(st.just(k), arg_value(k, typed), min_size=1)
        )
        if typed
        else st.dictionaries(st.sampled_from(ARG_KEYS), st.one_of(ids, numbers, anything), max_size=5),
    }[key]
    return right if typed else st.one_of(right, right, anything)  # wild: sometimes anything


@st.composite
def event(draw, typed=False):
    e = {}
    for k in KEYS:
        if draw(st.integers(0, 9)) < 7:
            e[k] = draw(value_for(k, typed))
    return e


@st.composite
def mutated_event(draw, typed=False):
    e = dict(draw(st.sampled_from(BASE_EVENTS)))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.integers(0, 3))
        k = draw(st.sampled_from(KEYS))
        if op == 0:
            e.pop(k, None)
        elif op == 1 and isinstance(e.get("args"), dict):
            a = dict(e["args"])
            ak = draw(st.sampled_from(ARG_KEYS))
            a[ak] = draw(arg_value(ak, typed))
            e["args"] = a
        else:
            e[k] = draw(value_for(k, typed))
    return e


def dump(doc) -> bytes:
    try:
        return orjson.dumps(doc)
    except TypeError:  # ints past 64 bits: orjson refuses them, json writes them
        return json.dumps(doc).encode()


@st.composite
def structured_doc(draw):
    # typed (3 in 4): every value has a type the loader accepts, so the document reaches the model
    # and the rules with absurd values; wild: any JSON anywhere, mostly caught by the loader.
    typed = draw(st.integers(0, 3)) > 0
    events = list(BASE_EVENTS)
    n = len(events)
    for _ in range(draw(st.integers(0, 12))):
        events[draw(st.integers(0, n - 1))] = draw(mutated_event(typed))
    events += draw(st.lists(event(typed), max_size=12))
    if draw(st.booleans()):
        events = draw(st.permutations(events))
    if draw(st.integers(0, 4)) == 0:
        keep = draw(st.sets(st.sampled_from(["X", "i", "s", "f", "M"]), max_size=4))
        events = [e for e in events if not (isinstance(e.get("ph"), str) and e["ph"] in keep)]
    doc = {k: v for k, v in BASE.items() if k != "traceEvents"}
    for k in (
        []
        if typed
        else draw(
            st.lists(
                st.sampled_from(
                    [
                        "deviceProperties",
                        "distributedInfo",
                        "with_stack",
                        "record_shapes",
                        "profile_memory",
                        "baseTimeNanoseconds",
                        "cuda_runtime_version",
                        "traceName",
                    ]
                ),
                max_size=3,
            )
        )
    ):
        doc[k] = draw(anything)
    # The members after the events (issue 17): some of the header's moved there, others of no
    # field, repeated fields (a null among them), a second "traceEvents" (msgspec keeps the last).
    keys = list(doc)
    cut = draw(st.integers(0, len(keys)))
    out = {k: doc[k] for k in keys[:cut]}
    out["traceEvents"] = events
    out.update({k: doc[k] for k in keys[cut:]})
    for _ in range(draw(st.integers(0, 3))):
        k = draw(st.sampled_from(["traceName", "with_stack", "distributedInfo", "pad", "traceEvents", "~x"]))
        out.pop(k, None)  # re-inserted at the end, after the events
        out[k] = (
            draw(st.lists(event(typed), max_size=5))
            if k == "traceEvents"
            else draw(st.one_of(st.none(), anything) if not typed or k in ("pad", "~x") else st.none())
        )
    return out


@SETTINGS
@given(structured_doc())
def test_fuzz_structured(doc):
    check(dump(doc))


# ---- bytes -------------------------------------------------------------------------------------
# Values that once split the two decoders (issue 17.4): numbers past float64, nesting past any
# trace, lone surrogates.
HOSTILE_VALUES = [
    b"1e309",
    b"-1e309",
    b"1e-400",
    b"123456789012345678901234567890",
    b"-0",
    b'"\\ud800"',
    b'"a\\udc00b"',
    b'"\\ud83d\\ude00"',
    b'"\\ud83d"',
    b"[" * 64 + b"]" * 64,
    b"[" * 1024 + b"]" * 1024,
    b'{"a":' * 70 + b"1" + b"}" * 70,
    b"[" * 59 + b"]" * 59,
    b"[" * 60 + b"]" * 60,  # the nesting limit (64) from args
    # issue 17: a string past the scanner's intern limit (64 KB), whitespace runs, NULs
    b'"' + b"x" * 70000 + b'"',
    b" " * 70000 + b"1",
    b'"a\\u0000b"',
    b'"a\x00b"',
]
_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_STRING = re.compile(rb'"(?:[^"\\\n]|\\.)*"')


@st.composite
def mutated_bytes(draw):
    """Mostly JSON-preserving edits (numbers and strings replaced in place), some that break it."""
    data = bytearray(BASE_BYTES)
    preserving = draw(st.booleans())
    for _ in range(draw(st.integers(1, 6))):
        n = len(data)
        if n == 0:
            break
        op = draw(st.integers(5, 9) if preserving else st.integers(0, 9))
        i = draw(st.integers(0, n - 1))
        if op >= 7:  # replace the next number with another (ts, dur, ids, sizes, shapes)
            mt = _NUMBER.search(data, i)
            if mt:
                data[mt.start() : mt.end()] = draw(
                    st.one_of(numbers.map(lambda v: json.dumps(v).encode()), st.sampled_from(HOSTILE_VALUES))
                )
        elif op >= 5:  # replace the next string (names, categories, phases, keys)
            mt = _STRING.search(data, i)
            if mt:
                data[mt.start() : mt.end()] = json.dumps(
                    draw(names), ensure_ascii=draw(st.booleans())
                ).encode("utf-8", "surrogatepass")
        elif op == 0:  # flip a byte
            data[i] ^= draw(st.integers(1, 255))
        elif op == 1:  # cut
            del data[i:]
        elif op == 2:  # delete a range
            del data[i : i + draw(st.integers(1, 200))]
        elif op == 3:  # insert bytes or JSON-ish tokens
            data[i:i] = draw(
                st.one_of(
                    st.binary(min_size=1, max_size=20),
                    st.sampled_from(
                        [
                            b"{",
                            b"}",
                            b"[",
                            b"]",
                            b",",
                            b":",
                            b'"',
                            b"\\",
                            b"null",
                            b"-",
                            b"1e999",
                            b"NaN",
                            b"\xff",
                            b"\x00",
                            b"[" * 5000,
                            b" " * 70000,
                            b"\x00" * 100,
                            b'"traceEvents": [], ',
                            b'"traceName": null, ',
                            b'"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1}], ',
                        ]
                    ),
                )
            )
        else:  # duplicate a range elsewhere
            j = draw(st.integers(0, n - 1))
            data[j:j] = data[i : i + draw(st.integers(1, 500))]
    out = bytes(data)
    if draw(st.integers(0, 3)) == 0:
        out = gzip.compress(out, compresslevel=1)
        if draw(st.booleans()):
            out = out[: draw(st.integers(0, len(out)))]
    return out


@SETTINGS
@given(mutated_bytes())
def test_fuzz_bytes(data):
    check(data)


def test_base_is_a_trace():
    check(BASE_BYTES)
