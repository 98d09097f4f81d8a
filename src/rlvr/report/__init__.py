"""`rlvr report RUN_DIR [RUN_B ...]`: a picture of a run without W&B, one self-contained HTML
page of its curves, eval scores, time per step and sample completions, for a finished run, one
in progress, or several side by side.

Reading a run (`run_data`), what to plot (`panels`), which completions to show (`samples`),
drawing (`plots`, matplotlib), the page (`page`). Needs the `report` extra (matplotlib,
pandas): `pip install -e '.[report]'`.
"""

from rlvr.report.page import render_page, write_report
from rlvr.report.run_data import ReportError, RunData, load_run

__all__ = ["ReportError", "RunData", "load_run", "render_page", "write_report"]
