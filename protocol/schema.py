"""The JSON Schema of ``profd-client analyze --format json`` (and of the daemon's reports), from the
msgspec types themselves: ``python -m profd.protocol.schema > docs/schema.json`` (a test checks it).

The document is ``{"reports": [Report...], "jobs": [JobReport...]}``: every trace's report, and a
job report per multi-rank job among them (``[]`` when none). Keys are camelCase throughout; the
keys of a finding's ``evidence`` too (the CLI writes them so; their values are the rule's own
numbers and names)."""

from __future__ import annotations

import sys

import msgspec

from .job import JobReport
from .types import Report, Struct


class AnalyzeOutput(Struct):
    """What ``profd-client analyze --format json`` prints."""

    reports: list[Report]
    jobs: list[JobReport] = []


def schema() -> dict:
    doc = msgspec.json.schema(AnalyzeOutput)
    doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    doc["title"] = "profd-client analyze --format json"
    return doc


def render() -> str:
    import json

    return json.dumps(schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
