"""What the editor shows of a report (server/daemon/present.py): hovers, inlay hints and code
lenses speak per profiled step, as the README promises ("per step unless 'total' is said, and
then it means the whole window"), on a real trace."""

from conftest import report_of

from profd.server.daemon import present
from profd.server.engine.rules.util import plural, us


def _hottest():
    r = report_of("tinygpt_naive")
    n = len(r.summary.steps)
    h = max(r.hot_lines, key=lambda h: h.cpu_total_us)
    return r, h, n


def test_the_hover_says_per_step_and_never_total_for_a_per_step_number():
    r, h, n = _hottest()
    assert n == 3 and h.cpu_total_us > 0 and h.calls
    text = present.hover_markdown(h, r.trace.path, [], (), n)
    assert "per step (mean of 3 profiled steps)" in text.splitlines()[0]
    # the time in the line's ops and their self time, per step (the sums over 3 steps, divided)
    assert (
        f"- CPU: {us(h.cpu_total_us / n)} in its ops, {us(h.cpu_self_us / n)} self, "
        f"{plural(h.calls / n, 'call')}"
    ) in text.splitlines()
    costs = [ln for ln in text.split("Top kernels")[0].splitlines() if ln.startswith("- ")]
    assert len(costs) >= 3 and not [ln for ln in costs if "total" in ln]  # no window total here


def test_hints_and_lenses_say_per_step():
    r, h, n = _hottest()
    assert present.hint_label(h, n).startswith("per step: ")
    title = present.function_lens_title("main", h.gpu_us, h.cpu_total_us, h.launches, 1, n, None)
    assert title.startswith("profd: main: per step GPU ") and "total" not in title
