"""The rule catalog: stable codes, titles, default severities and doc anchors.

Codes never change meaning; a new finding gets a new code. The doc anchor is the link target the
LSP ``codeDescription`` and SARIF ``helpUri`` carry: ``rules.md#<code>`` in the docs installed with
the package (``docs/`` ships as ``profd/docs``), or under ``$PROFD_DOCS_URL`` when set (a base URL
such as ``https://example.org/profd/docs``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache


@lru_cache(maxsize=None)
def _installed_docs() -> str:
    # installed: site-packages/profd/{protocol,docs}; a source tree: {protocol,docs}/ side by side
    from urllib.parse import quote

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "rules.md")
    return "file://" + quote(path)


def docs_url() -> str:
    """Where docs/rules.md is: ``$PROFD_DOCS_URL/rules.md``, else the installed file."""
    base = os.environ.get("PROFD_DOCS_URL")
    return base.rstrip("/") + "/rules.md" if base else _installed_docs()


@dataclass(frozen=True)
class RuleInfo:
    code: str
    title: str
    severity: str  # default: error | warning | information | hint
    family: str  # the server/rules module that implements it

    @property
    def doc_url(self) -> str:
        return f"{docs_url()}#{self.code}"


_RULES = [
    RuleInfo("overhead-bound", "GPU mostly idle while the CPU dispatches", "warning", "bound"),
    RuleInfo("compute-bound", "GPU busy for most of the active steps", "information", "bound"),
    RuleInfo("transfer-bound", "Host/device copies fill the step", "warning", "bound"),
    RuleInfo("small-problem", "Overhead-bound with small GEMM shapes", "information", "bound"),
    RuleInfo("cold-start-step", "First active step much wider than the rest", "warning", "steps"),
    RuleInfo("one-time-setup", "One-time set-up inside the profiled window", "warning", "steps"),
    RuleInfo("profiler-artifact", "Time that belongs to the profiler, not the program", "information", "artifacts"),
    RuleInfo("sync-wait", "A synchronising call blocks the CPU", "warning", "sync"),
    RuleInfo("host-sync", "Device-to-host synchronisation forced from user code", "warning", "sync"),
    RuleInfo("gpu-idle-gap", "GPU idle gaps inside steps", "warning", "gaps"),
    RuleInfo("gpu-contention", "Kernels start late while this trace's GPU lane is idle", "warning", "gaps"),
    RuleInfo("kernel-class", "GPU time by kernel class", "hint", "kernels"),
    RuleInfo("kernel-jitter", "One kernel configuration with widely spread durations", "warning", "kernels"),
    RuleInfo("fp32-matmul", "GEMM time in fp32 kernels without tensor cores", "warning", "kernels"),
    RuleInfo("misaligned-dims", "fp16/bf16 GEMM dims not multiples of 8", "warning", "kernels"),
    RuleInfo("launch-storm", "One line launching many tiny kernels per step", "warning", "kernels"),
    RuleInfo("compile-overhead", "torch.compile wrapper time outweighs a tiny region", "warning", "compile"),
    RuleInfo("compile-fusion", "What dispatcher-level fusion really ran on the GPU", "information", "compile"),
    RuleInfo("compile-graph-break", "A compiled function runs as several graphs with eager code between", "warning", "compile"),
    RuleInfo("memory-child-pressure", "Large allocation made by a call's children", "information", "memory"),
    RuleInfo("memory-peak", "Peak allocated memory and the line that reached it", "information", "memory"),
    RuleInfo("memory-growth", "Allocated memory rises step over step and is not freed", "warning", "memory"),
    RuleInfo("unfused-attention", "Attention written out with the scores materialised", "warning", "attention"),
    RuleInfo("pageable-memcpy", "Host/device copies from pageable memory", "warning", "training"),
    RuleInfo("optimizer-foreach-off", "Single-tensor optimizer implementation", "warning", "training"),
    RuleInfo("zero-grad-not-none", "zero_grad writes zeros every step", "warning", "training"),
    RuleInfo("conv-bias-before-bn", "Convolution bias feeding batch norm", "information", "training"),
    RuleInfo("dataloader-bound", "GPU waits while the DataLoader produces the batch", "warning", "training"),
    RuleInfo("rank-straggler", "One rank much slower than the others", "warning", "ranks"),
    RuleInfo("unmapped-source", "Frames that map onto no file of this machine (editors)", "information", "sources"),
]

RULES: dict[str, RuleInfo] = {r.code: r for r in _RULES}


def rule(code: str) -> RuleInfo:
    return RULES[code]


class UnknownCode(ValueError):
    """A selection names no rule: ``nearest`` is the closest real code or family, if any."""

    def __init__(self, code: str, nearest: "str | None"):
        super().__init__(code)
        self.code, self.nearest = code, nearest


def families() -> dict[str, set[str]]:
    fam: dict[str, set[str]] = {}
    for c, info in RULES.items():
        fam.setdefault(info.family, set()).add(c)
    return fam


def expand_code(code: str, allow_families: bool = True) -> set[str]:
    """The rule codes a selection item stands for: a code, a family (``kernels``) or ``ALL``.
    Raises ``UnknownCode`` naming the nearest real one."""
    if code in RULES:
        return {code}
    fam = families()
    if allow_families and code == "ALL":
        return set(RULES)
    if allow_families and code in fam:
        return fam[code]
    import difflib

    near = difflib.get_close_matches(code, list(RULES) + (list(fam) if allow_families else []), n=1, cutoff=0.5)
    raise UnknownCode(code, near[0] if near else None)

