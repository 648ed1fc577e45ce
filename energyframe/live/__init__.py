"""Live power while a run goes: the subscriber interface the recorder feeds (``listener``), the
per-channel state it keeps (``tracker``) and the Prometheus exporter that serves it
(``prometheus``); ``energyframe monitor`` and ``energyframe run --prometheus-port`` use them."""
