#!/usr/bin/env bash
# HTA (HolisticTraceAnalysis) in its own venv, bench/.hta-venv, for bench/bench.py's "hta" mode.
# HTA is not a dependency of profd: a plain `pip install HolisticTraceAnalysis` pulls jupyterlab,
# pytest and pydot too. So HTA goes in with --no-deps and only what `from hta.trace_analysis import
# TraceAnalysis`, TraceAnalysis(trace_dir), get_temporal_breakdown and get_idle_time_breakdown need
# (found by trying: pandas, numpy, plotly, networkx, psutil, PyYAML; pandas and plotly bring
# python-dateutil, tzdata, narwhals, packaging). Versions are the ones the bench was run with.
#
#     bash bench/setup_hta.sh            # PYTHON=python3.11 bash bench/setup_hta.sh for another python
set -euo pipefail
cd "$(dirname "$0")"
VENV=.hta-venv
"${PYTHON:-python3}" -m venv "$VENV"
"$VENV/bin/pip" install --no-deps HolisticTraceAnalysis==0.5.0
"$VENV/bin/pip" install pandas==3.1.1 numpy==2.4.6 plotly==7.1.0 networkx==3.6.1 psutil==7.2.2 PyYAML==6.0.4
"$VENV/bin/python" -c "from hta.trace_analysis import TraceAnalysis; import hta, pandas; print('hta ok, pandas', pandas.__version__)"
# `pip check` here lists jupyterlab, pydot and pytest as missing: on purpose, the calls above do not use them.
