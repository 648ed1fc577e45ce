"""Text from a run directory reaches the terminal as text: a phase, window or channel name, a
warning, a reason, a path holding ``ESC ] 0;... BEL ESC [2J`` (retitle the window, clear the
screen) or rich ``[markup]`` is printed with its control characters escaped and its markup as
written, by ``show``, ``compare``, ``runs``, the console reporter, warnings and errors."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import energyframe as ef
from energyframe.cli import main
from energyframe.results.display import cell_text, md_text, printable

#: an OSC that retitles the terminal window, then a CSI that clears the screen; a one-byte CSI
#: (C1), a direction override, and markup rich would act on
ATTACK = "ph\x1b]0;PWNED\x07\x1b[2J\x9b31m\u202ease[/red][bold]"
SHOWN = "ph\\x1b]0;PWNED\\x07\\x1b[2J\\x9b31m\\u202ease[/red][bold]"


def no_control(text: str) -> None:
    """Nothing a terminal would act on: no C0 control but line ends, no DEL, no C1, no bidi mark."""
    bad = [c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F or c == "\u202e"]
    assert not bad, f"control characters reach the terminal: {bad!r}"


@pytest.fixture(scope="module")
def crafted(tmp_path_factory) -> Path:
    """A run whose phase name, window name and a warning hold the attack."""
    out = tmp_path_factory.mktemp("crafted") / "run"
    with ef.measure(power="none", out=out) as m:
        for _ in range(3):
            with m.window(ATTACK):
                pass
        m.warn(f"warning about {ATTACK}")
    return out


def test_the_helper_escapes_every_control_character_and_keeps_the_rest():
    assert printable(ATTACK) == SHOWN
    assert printable("a\tb\nc") == "a\\x09b\\x0ac" and printable("a\nb", lines=True) == "a\nb"
    assert printable("µJ/iter → 3 W") == "µJ/iter → 3 W"  # text is text
    assert cell_text("[red]x") == "\\[red]x"
    no_control(md_text(ATTACK))


@pytest.mark.parametrize("argv", [["show", "{run}", "--windows", "--wide"], ["show", "{run}"], ["runs", "{parent}"],
                                  ["compare", "{run}", "{copy}"], ["compare", "{run}", "{copy}", "--table", "md"]])
def test_every_command_shows_run_data_as_text(crafted: Path, tmp_path: Path, argv):
    copy = Path(shutil.copytree(crafted, tmp_path / "copy"))
    args = [a.format(run=crafted, copy=copy, parent=crafted.parent) for a in argv]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    no_control(r.output)
    assert "PWNED" in r.output  # shown, not swallowed
    if argv[0] == "show":
        assert SHOWN in r.output and f"warning about {SHOWN}" in r.output


def test_the_console_reporter_of_the_api_prints_it_as_text(crafted: Path):
    table = ef.load_run(crafted).table()
    no_control(table)
    assert "PWNED" in table


def on_a_terminal(argv: list[str]) -> str:
    """What ``energyframe ARGV`` writes to a terminal (a real pty as its standard output)."""
    import os
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "energyframe", *argv], stdout=follower, stderr=subprocess.PIPE)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
    return b"".join(chunks).decode().replace("\r\n", "\n")


@pytest.mark.parametrize("argv", [["runs", "{parent}", "--csv"], ["compare", "{run}", "{copy}", "--table", "csv"]])
def test_csv_is_escaped_on_a_terminal_and_in_a_pipe(crafted: Path, tmp_path: Path, argv):
    copy = Path(shutil.copytree(crafted, tmp_path / "copy"))
    args = [a.format(run=crafted, copy=copy, parent=crafted.parent) for a in argv]
    for shown in (on_a_terminal(args), CliRunner().invoke(main, args).stdout):
        no_control(shown)
        assert SHOWN in shown


def test_an_error_naming_a_crafted_path_is_one_line_of_text(tmp_path: Path):
    r = CliRunner().invoke(main, ["show", str(tmp_path / ATTACK)])
    assert r.exit_code == 1
    no_control(r.output)
    assert r.output.count("\n") == 1 and "\\x1b]0;PWNED\\x07" in r.output


def test_a_log_line_is_printed_as_text():
    # a command of its own, registered on the real command line, logging what a run would warn
    code = (
        "import logging, sys\n"
        "from energyframe.cli import main\n"
        "@main.command('say')\n"
        "def say():\n"
        f"    logging.getLogger('energyframe').warning('warning: %s', {ATTACK!r})\n"
        "main(['say'], prog_name='energyframe')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"warning: {SHOWN}\n"
