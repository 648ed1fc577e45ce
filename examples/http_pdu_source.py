"""A power source for a PDU that serves an outlet's power as JSON over HTTP, in under 40 lines:
``PollingSource`` owns the thread, the buffer, dedup, error latching and stopping.

Register it in your package's pyproject.toml (``pdu = "my_pdu:HTTPPDUPowerSource"`` under
``[project.entry-points."energyframe.power"]``), then ``--power pdu:url=http://pdu/outlet/3``.
Run as a script, it serves a fake PDU on 127.0.0.1 and measures one window with it.
"""

import json
from urllib.request import urlopen

from energyframe.plugin import Channel, Option, PollingSource, PowerSourceError, Quantity, Scope, Timing


class HTTPPDUPowerSource(PollingSource):
    """One PDU outlet's power, read over HTTP from a JSON document such as ``{"watts": 231.5}``."""

    DESCRIPTION = "a PDU outlet's power over HTTP (JSON)"
    OPTIONS = (
        Option("url", required=True, help="the outlet's JSON reading, e.g. http://pdu/outlet/3"),
        Option("key", "str", "watts", "the JSON key holding the power. Units: W"),
        Option("interval_s", "float", 1.0, "pause between two requests. Units: s", minimum=0.01),
        Option("averaging_s", "float", 1.0, "the period the PDU averages over. Units: s", minimum=0.0),
    )

    def open(self):
        self.poll()  # a wrong URL or key fails here, before anything runs
        period, averaging = self.options["interval_s"], self.options["averaging_s"]
        kw = dict(timing=Timing.PERIOD_END, averaging_s=averaging, description="PDU outlet power")
        return [Channel("pdu", Quantity.POWER, Scope.SYSTEM_WALL, max(period, averaging), **kw)]

    def poll(self):
        url = self.options["url"]
        try:
            with urlopen(url, timeout=5) as reply:
                return {"pdu": float(json.load(reply)[self.options["key"]])}
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise PowerSourceError(f"cannot read the PDU at {url}: {e!r}") from e


if __name__ == "__main__":
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, HTTPServer

    import energyframe as ef

    class FakePDU(BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"watts": 231.5}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), FakePDU)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/outlet/3"
    source = HTTPPDUPowerSource(name="pdu", url=url, interval_s=0.1, averaging_s=0.1)
    with ef.measure(power=[source], sync=None) as m:
        with m.window("idle"):
            time.sleep(1.0)
    row = m.result.windows.iloc[0]
    print(f"{row['channel']}: {row['mean_power_w']:.1f} W over {row['duration_s']:.2f} s")
    server.shutdown()
