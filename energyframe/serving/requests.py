"""A serve-bench run's requests.csv read back: the table, and the work model's spans in it (what
the report's figures and ``ef.load_runs`` users read; ``workload.py`` writes the file)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .summary import REQUEST_COLUMNS
from .timeline import RequestSpan

REQUESTS_CSV = "requests.csv"


def read_requests(run_dir: Path | str) -> pd.DataFrame:
    """A serve-bench run's requests.csv as a table (``StoreError``-free: a missing file is an
    empty table with the columns)."""
    path = Path(run_dir) / REQUESTS_CSV
    if not path.is_file():
        return pd.DataFrame(columns=REQUEST_COLUMNS)
    return pd.read_csv(path, dtype={"request_id": str, "status": str, "error": str, "finish_reason": str})


def spans_of(frame: pd.DataFrame) -> list[RequestSpan]:
    """The work model's spans as requests.csv keeps them (Unix seconds)."""
    return [
        RequestSpan(
            str(r.request_id), r.sent_s, r.prefill_s, r.first_token_s, r.end_s, float(r.prompt_tokens)
        )
        for r in frame.itertuples()
    ]
