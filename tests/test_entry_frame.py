"""Work in a function that was already running when the profiler started (issue 33): the frame is
named by the line it was at (the ``with profile(...)``), and its calls are aligned with the
statements the profiler saw, those of the with-block, as for any other frame.

Real trace: examples/recorded/entry_frame_cpu.json.gz, recorded here on CPU (PyTorch 2.13.0+cpu,
``ProfilerActivity.CPU``, with_stack, record_shapes, profile_memory) from
examples/recorded/src/entry_frame.py: the commonest script, the profiler opened inside main() with
no schedule and the loop written right under it. Before, the loop's 16 calls went on the
statements after the with-block (print, makedirs, export, open, ...), which never ran under the
profiler, and the profiler's own __enter__ on ``def main():``.
"""

import os

from profd.server.engine import Options, analyze_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACE = os.path.join(ROOT, "examples", "recorded", "entry_frame_cpu.json.gz")
SRC = os.path.join(ROOT, "examples", "recorded", "src")
WITH, MODEL, LOSS, END = 27, 30, 31, 31  # entry_frame.py: with profile(...) / out = model(x) / total = ...


def _lines():
    r = analyze_file(TRACE, Options(workspace=[SRC]))
    return r, {h.line: h for h in r.hot_lines if h.path.endswith("entry_frame.py")}


def test_the_loop_of_the_frame_the_profiler_opened_in_lands_on_its_statements():
    r, lines = _lines()
    with open(os.path.join(SRC, "entry_frame.py")) as f:
        src = f.read().splitlines()
    assert (
        src[WITH - 1].lstrip().startswith("with profile(")
        and "model(x)" in src[MODEL - 1]
        and "crit(out, x)" in src[LOSS - 1]
    )
    for ln in (MODEL, LOSS):
        h = lines[ln]
        assert h.precision == "statement" and h.calls > 0 and h.cpu_total_us > 0 and h.bytes_allocated > 0
    # nothing ran after the with-block under the profiler
    assert not [ln for ln, h in lines.items() if END < ln < 40 and (h.calls or h.cpu_inclusive_us)]
    # and nothing of the loop sits on the def line
    defs = [h for h in lines.values() if h.precision == "function"]
    assert all(h.cpu_total_us == 0 and h.cpu_inclusive_us == 0 for h in defs)
    (peak,) = [d for d in r.diagnostics if d.code == "memory-peak"]
    assert peak.location.line in (MODEL, LOSS) and peak.location.precision == "statement"
