"""Before/after diff on the real TinyGPT traces: the naive run's planted problems go away in the
tuned run, each on its own source line; the tuned step is about half the naive one."""

from conftest import codes, report_of
from profd.server.engine.diff import diff_reports
from test_rules_training import NAIVE_ONLY, line_of


def test_naive_to_tuned_shows_the_findings_that_went_away_with_their_lines():
    old, new = report_of("tinygpt_naive"), report_of("tinygpt_tuned")
    d = diff_reports(old, new)
    gone_rules = {r.code for r in d.rules if r.change == "gone"}
    assert NAIVE_ONLY <= gone_rules
    gone = [f for f in d.findings if f.change == "gone"]
    # every finding of the naive report that the tuned report lacks is listed, at its line
    assert {f.code for f in gone} >= NAIVE_ONLY
    where = {(f.code, line_of(f.location.path, f.location.line).strip()) for f in gone if f.location.line}
    assert ("host-sync", 'print("step", step, "loss", loss.item(), "tok", int(s.sum()))') in where
    assert ("launch-storm", "out.append((row > 100).sum())") in where
    assert ("pageable-memcpy", "x = xb.to(dev, non_blocking=not naive)") in where
    assert ("optimizer-foreach-off", "opt.step()") in where
    assert ("zero-grad-not-none", "opt.zero_grad(set_to_none=not naive)") in where
    assert any(c == "fp32-matmul" for c, _ in where)
    # the same code on the same line in both runs is matched, not reported as gone + new
    kept_lines = {(f.code, f.location.line) for f in d.findings if f.change == "kept"}
    assert not {(f.code, f.location.line) for f in gone} & kept_lines
    assert d.summary.new_step_us < 0.7 * d.summary.old_step_us


def test_lines_say_faster_and_carry_the_findings_that_left_them():
    d = diff_reports(report_of("tinygpt_naive"), report_of("tinygpt_tuned"))
    by = {(ln.path.rsplit("/", 1)[-1], ln.line): ln for ln in d.lines}
    step = next(ln for k, ln in by.items() if "optimizer-foreach-off" in ln.codes_gone)
    assert step.trend == "faster" and step.delta_us < 0  # fused AdamW: opt.step() costs far less
    assert "opt.step()" in line_of(step.path, step.line)
    loop = next(ln for ln in d.lines if ln.function == "token_stats" and "launch-storm" in ln.codes_gone)
    assert loop.trend == "gone"  # the tuned run has no per-row loop at all


def test_reverse_diff_and_self_diff():
    old, new = report_of("tinygpt_naive"), report_of("tinygpt_tuned")
    back = diff_reports(new, old)
    assert NAIVE_ONLY <= {r.code for r in back.rules if r.change == "new"}
    same = diff_reports(old, old)
    assert all(f.change == "kept" for f in same.findings)
    assert all(ln.trend == "same" for ln in same.lines)
    assert {r.code for r in same.rules} == codes(old)
