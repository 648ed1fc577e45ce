"""The sampler process: ``PollingSource``'s process mode (``python -m energyframe.kit.sampler``).

The measured process starts a child with the source's class path, options and prepared state;
the child rebuilds the source, opens the hardware and runs its loops, and appends a line
protocol to a file that the parent parses in ``read()``. Writer and reader are side by side:

    C,<json: {"channels": [...], "info": {...}}>   once, when the hardware is open
    S,<channel index>,<time>,<value>               a sample (index into C's channels)
    W,<message>                                    a warning
    E,<message>                                    a failure; the child exits 1
    T,<signal name>                                the child was told to stop by a signal
    Q,<json: info>                                 a clean stop; the child exits 0

The child ignores SIGINT (the parent decides when sampling ends), stops cleanly on SIGTERM, and
exits when its parent dies. A clean stop the parent did not ask for (SIGTERM from a job
scheduler, an administrator) fails the source with the signal named, not as a stall.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import PowerSourceError
from ..model import Channel, Sample, SourceContext

#: how long a reaped process may take to exit before it is killed. Units: s.
REAP_TIMEOUT_S = 5.0


def reap(proc: subprocess.Popen | None, sig: int = signal.SIGTERM) -> None:
    """Ask a process to exit, kill it when it does not within ``REAP_TIMEOUT_S``, and wait."""
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.send_signal(sig)
        proc.wait(timeout=REAP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    except ProcessLookupError:
        pass

#: how often the child hands its samples over and checks on its parent. Units: s.
FLUSH_INTERVAL_S = 0.05
#: the most the parent parses in one ``read()`` (the rest comes next time): a few tenths of a
#: second of parsing, well inside ``READ_BUDGET_S``
MAX_CHUNK_BYTES = 4 << 20


class LineWriter:
    """The child's side: buffers lines from the acquisition threads; ``flush`` writes them."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "a")
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._index: dict[str, int] = {}

    def _put(self, line: str) -> None:
        with self._lock:
            self._lines.append(line)

    def channels(self, channels: Sequence[Channel], info: Mapping[str, Any]) -> None:
        self._index = {c.name: i for i, c in enumerate(channels)}
        self._put("C," + json.dumps({"channels": [c.to_json() for c in channels], "info": dict(info)}))
        self.flush()

    def samples(self, batch: list[Sample]) -> None:
        lines = [f"S,{self._index[s.channel]},{s.time_s!r},{s.value!r}" for s in batch]
        with self._lock:
            self._lines.extend(lines)

    def warning(self, message: str) -> None:
        self._put("W," + _one_line(message))

    def error(self, message: str) -> None:
        self._put("E," + _one_line(message))
        self.close()

    def signalled(self, name: str) -> None:
        self._put("T," + name)

    def done(self, info: Mapping[str, Any]) -> None:
        self._put("Q," + json.dumps(dict(info)))
        self.close()

    def flush(self) -> None:
        with self._lock:
            lines, self._lines = self._lines, []
        if lines:
            self._file.write("\n".join(lines) + "\n")
            self._file.flush()

    def close(self) -> None:
        self.flush()
        self._file.close()


class LineReader:
    """The parent's side: parses what the child appended since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = ""
        self.channels: list[Channel] = []
        self.info: dict[str, Any] = {}
        self.warnings: list[str] = []
        self.error: str | None = None
        self.signal: str | None = None
        self.done = False

    def parse_pending(self) -> bool:
        """Whether the file holds bytes not parsed yet."""
        return self.path.exists() and self.path.stat().st_size > self._offset

    def parse(self) -> list[Sample]:
        """The samples of the lines the child appended since the last call; its other lines
        (channels, warnings, an error, a signal, the end) kept on this reader."""
        samples = []
        for line in self._new_lines():
            kind, _, rest = line.partition(",")
            if kind == "S":
                index, t, value = rest.split(",")
                samples.append(Sample(self.channels[int(index)].name, float(t), float(value)))
            else:
                self._keep(kind, rest)
        return samples

    def _new_lines(self) -> list[str]:
        """The whole lines appended since the last call (at most ``MAX_CHUNK_BYTES``); an
        incomplete last line waits for the rest."""
        with open(self.path) as f:
            f.seek(self._offset)
            chunk = f.read(MAX_CHUNK_BYTES)
            self._offset = f.tell()
        if not chunk:
            return []
        lines = (self._partial + chunk).split("\n")
        self._partial = lines.pop()
        return lines

    def _keep(self, kind: str, rest: str) -> None:
        """A line that is not a sample: the channels and the source's description (``C``), a
        warning (``W``), an error (``E``), the signal that ended the child (``T``), the end with
        the final description (``Q``)."""
        if kind == "C":
            header = json.loads(rest)
            self.channels = [Channel.from_json(c) for c in header["channels"]]
            self.info = header["info"]
        elif kind == "W":
            self.warnings.append(rest)
        elif kind == "E":
            self.error = rest
        elif kind == "T":
            self.signal = rest
        elif kind == "Q":
            self.done = True
            if rest:
                self.info = json.loads(rest)


def _one_line(message: str) -> str:
    return " ".join(str(message).splitlines())


class Remote:
    """The parent's handle on a source acquiring in a child process."""

    def __init__(self, source: Any) -> None:  # a PollingSource (polling imports this module)
        self.source = source
        self.label = source.PROCESS_LABEL or f"{source.name} sampler"
        self.proc: subprocess.Popen | None = None
        self.reader: LineReader | None = None
        self.info: dict[str, Any] = {}
        self._files: list[Path] = []  # temporary files removed on stop
        self._stderr: Path | None = None
        self._stopped = False
        self._lock = threading.Lock()

    def start(self, context: SourceContext) -> list[Channel]:
        source = self.source
        cls = type(source)
        if "<locals>" in cls.__qualname__ or cls.__module__ == "__main__":
            raise PowerSourceError(
                f"power source {source.name!r} cannot run in a separate process: its class "
                f"{cls.__qualname__} is not importable by name (define it in a module, or use mode=thread)"
            )
        config = {
            "source": f"{cls.__module__}:{cls.__qualname__}",
            "path": _import_roots(cls.__module__),
            "name": source.name,
            # None means "not set" (an option's value is never None otherwise)
            "options": {k: _jsonable(v) for k, v in source.options.items() if v is not None},
            "prepared": source.prepared,
            "raw_dir": str(context.raw_dir) if context.raw_dir is not None else None,
        }
        if context.raw_dir is not None:
            context.raw_dir.mkdir(parents=True, exist_ok=True)
            out = context.raw_dir / f"{source.PROCESS_LOG}.log"
            self._stderr = context.raw_dir / f"{source.PROCESS_LOG}.stderr"
        else:
            out, self._stderr = _temporary(".log"), _temporary(".stderr")
            self._files = [out, self._stderr]
        out.write_text("")
        self.reader = LineReader(out)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in [env.get("PYTHONPATH", ""), *config["path"], *_import_roots("energyframe")] if p
        )
        with open(self._stderr, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "energyframe.kit.sampler", json.dumps(config), str(out)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=env,
                start_new_session=True,  # a Ctrl-C reaches the parent, which stops the child cleanly
            )
        try:
            self._wait_for_channels(source.START_TIMEOUT_S)
        except BaseException:
            self._end()
            self._remove_files()
            raise
        return list(self.reader.channels)

    def _wait_for_channels(self, timeout_s: float) -> None:
        reader, proc = self.reader, self.proc
        assert reader is not None and proc is not None  # set by start
        deadline = time.monotonic() + timeout_s
        while True:
            self._parse()
            if reader.error is not None:
                raise PowerSourceError(reader.error)
            if reader.channels:
                return
            if proc.poll() is not None:
                self._parse()
                if reader.channels:
                    return
                raise PowerSourceError(
                    reader.error
                    or f"the {self.label} process exited with code {proc.returncode} before it started"
                    + self._stderr_tail()
                )
            if time.monotonic() > deadline:
                raise PowerSourceError(f"the {self.label} process did not start within {timeout_s:.0f} s")
            time.sleep(0.01)

    def _parse(self) -> None:
        """Parse what the child wrote into the source's buffer, and hand its warnings on."""
        reader, source = self.reader, self.source
        assert reader is not None  # set by start
        samples = reader.parse()
        self.info = reader.info
        for message in reader.warnings:
            source.context.warn(message)
        reader.warnings.clear()
        if samples:
            with source._poll_lock:
                source._poll_pending.extend(samples)

    def pull(self) -> None:
        """Move what the child wrote into the source's buffer; notice a child that died."""
        with self._lock:
            if self.reader is None or self._stopped:
                return
            self._parse()
            reader, source, proc = self.reader, self.source, self.proc
            assert proc is not None  # started together with the reader
            if reader.error is None and not source.stopping and (reader.done or proc.poll() is not None):
                self._parse()  # what it wrote just before it ended
                if reader.error is None:
                    source.fail(self._ended_message(proc))
            if reader.error is not None:
                source.fail(reader.error)

    def stop(self) -> None:
        self.source._poll_stop.set()
        self._end()
        with self._lock:
            if not self._stopped and self.reader is not None:
                while self.reader.parse_pending():
                    self._parse()  # everything the child wrote, MAX_CHUNK_BYTES at a time
                if self.reader.error is not None:
                    self.source.fail(self.reader.error)
                self._stopped = True
        self._remove_files()

    def _ended_message(self, proc: subprocess.Popen) -> str:
        """Why the child ended although the parent never asked it to."""
        reader = self.reader
        assert reader is not None
        if reader.done:
            by = reader.signal or "a signal"
            return (
                f"the {self.label} process (pid {proc.pid}) was stopped by {by} from outside energyframe "
                "(a job scheduler, a memory limit, an administrator?): sampling ended"
            )
        code = proc.poll()
        how = f"exit code {code}"
        if code is not None and code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                pass
        return f"the {self.label} process died ({how})" + self._stderr_tail()

    def _remove_files(self) -> None:
        for path in self._files:
            path.unlink(missing_ok=True)

    def _end(self) -> None:
        reap(self.proc)

    def _stderr_tail(self) -> str:
        if self._stderr is None or not self._stderr.exists():
            return ""
        lines = [line for line in self._stderr.read_text(errors="replace").splitlines() if line.strip()]
        return (": " + lines[-1].strip()) if lines else ""


def _temporary(suffix: str) -> Path:
    fd, name = tempfile.mkstemp(prefix="energyframe-sampler-", suffix=suffix)
    os.close(fd)
    return Path(name)


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    return value


def _import_roots(module: str) -> list[str]:
    """The folder from which ``module`` was imported here, so that the child imports the same."""
    mod = sys.modules.get(module)
    path = getattr(mod, "__file__", None)
    if not path:
        return []
    root = Path(path).resolve().parent
    depth = module.count(".") + (1 if Path(path).name == "__init__.py" else 0)
    for _ in range(depth):
        root = root.parent
    return [str(root)]


def _rebuild(config: Mapping[str, Any]) -> Any:
    for root in config.get("path", []):
        if root not in sys.path:
            sys.path.append(root)
    module, _, qualname = config["source"].partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    source = obj(name=config["name"], **config["options"])
    if not callable(getattr(source, "_run_here", None)):  # the PollingSource protocol
        raise TypeError(f"{config['source']} is not a PollingSource")
    return source


def main(argv: list[str] | None = None) -> int:
    """The child process: rebuild the source, acquire, write the line protocol, stop cleanly."""
    argv = sys.argv[1:] if argv is None else argv
    config = json.loads(argv[0])
    out = LineWriter(argv[1])
    parent = os.getppid()
    stop = threading.Event()
    received: list[str] = []

    def on_term(signum: int, _frame: Any) -> None:
        received.append(signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when sampling ends
    source = _opened_source(config, out)
    if source is None:
        return 1
    opened_cpu_s, opened_s = time.process_time(), time.monotonic()
    start_wall_s = process_age_s()
    source._run_here(out.samples)
    _sample_until_stopped(source, out, stop, parent)
    if not _stopped_cleanly(source, out):
        return 1
    if received:
        out.signalled(received[0])
    # the whole process's CPU time while it sampled (its loops, the flushes, the protocol), and
    # what starting it took (the interpreter, imports, opening the hardware)
    cost = source.acquisition(cpu_s=time.process_time() - opened_cpu_s, wall_s=time.monotonic() - opened_s)
    cost.update(start_cpu_s=round(opened_cpu_s, 6), start_wall_s=start_wall_s)
    out.done({**source.describe(), "acquisition": cost})
    return 0


def _opened_source(config: Mapping[str, Any], out: LineWriter) -> Any:
    """The source the parent described, rebuilt here and opened, its channels written; ``None``
    (the error written) when it cannot be rebuilt or opened."""
    try:
        source = _rebuild(config)
    except Exception as e:
        out.error(f"the sampler process could not rebuild {config['source']}: {e!r}")
        return None
    raw_dir = Path(config["raw_dir"]) if config.get("raw_dir") else None
    source.context = SourceContext(raw_dir=raw_dir, warn=out.warning)
    source.prepared = dict(config.get("prepared") or {})
    try:
        channels = source._open_here()
    except PowerSourceError as e:
        out.error(str(e))
        return None
    except Exception as e:
        out.error(f"power source {source.name!r} could not start: {e!r}")
        return None
    out.channels(channels, source.describe())
    return source


def _sample_until_stopped(source: Any, out: LineWriter, stop: threading.Event, parent: int) -> None:
    """Flush the samples every ``FLUSH_INTERVAL_S`` and watch the loops, until the parent says
    stop, the source stops, or the parent dies (a child must not sample forever)."""
    while not stop.is_set() and not source.stopping:
        stop.wait(FLUSH_INTERVAL_S)
        source._watch()
        out.flush()
        if os.getppid() != parent:  # the parent died: do not sample forever
            break


def _stopped_cleanly(source: Any, out: LineWriter) -> bool:
    """Stop the source's loops and write what they still held; ``False`` (the error written)
    when a loop had failed."""
    source._stop_here()
    with source._poll_lock:
        pending, source._poll_pending = source._poll_pending, []
    if pending:
        out.samples(pending)
    if source._poll_error is not None:
        out.error(source._poll_error)
        return False
    return True


def process_age_s() -> float | None:
    """Seconds since this process started (Linux; ``None`` elsewhere). Units: s."""
    try:
        with open("/proc/self/stat") as f:
            started_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime_s = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return round(max(0.0, uptime_s - started_ticks / os.sysconf("SC_CLK_TCK")), 3)


if __name__ == "__main__":
    # run the module's own copy, not this __main__ duplicate, so classes compare as imported
    from energyframe.kit.sampler import main as _main

    sys.exit(_main())
