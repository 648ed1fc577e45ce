"""Work on what was recorded: logs from elsewhere (``logs``), ``analyze``, rebuilding a run that died (``recovery``), synthetic runs with a known truth (``simulate``)."""
