"""``energyframe serve-bench``: thin, as the rest of the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..errors import UsageError
from ..options import FiniteFloat
from ..results.paths import click_out_path

CONTEXT = {"help_option_names": ["-h", "--help"]}


def _extra_body(value: str | None) -> dict | None:
    if value is None:
        return None
    try:
        body = json.loads(value)
    except json.JSONDecodeError as e:
        raise UsageError(f"--extra-body {value!r}: not JSON ({e.msg})") from e
    if not isinstance(body, dict):
        raise UsageError(f"--extra-body {value!r}: give a JSON object, e.g. '{{\"ignore_eos\": true}}'")
    return body


@click.command("serve-bench", context_settings=CONTEXT)
@click.option(
    "--url", required=True, metavar="URL", help="The server's OpenAI base URL, e.g. http://127.0.0.1:8000/v1."
)
@click.option(
    "--model", metavar="NAME", help="The model named in every request. Default: the first the server lists."
)
@click.option(
    "--prompts",
    required=True,
    metavar="SPEC|FILE",
    help="synthetic:prompt_tokens=512,output_tokens=128 (also seed=, same=true) or a JSONL file of "
    '{"prompt": ...} or {"messages": [...]} lines (max_tokens, prompt_tokens, arrival_s, id, extra).',
)
@click.option(
    "--requests", type=click.IntRange(min=1), help="Requests to send. Default: every line of the file."
)
@click.option(
    "--rate",
    type=float,
    metavar="R",
    help="Poisson arrivals, R requests per second (inf: all at once). With --concurrency, at most that many in flight.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    metavar="N",
    help="Most requests in flight; alone, a closed loop of N.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the Poisson arrivals.")
@click.option(
    "--endpoint",
    type=click.Choice(["chat", "completions"]),
    default="chat",
    show_default=True,
    help="/chat/completions or /completions.",
)
@click.option(
    "--power",
    "power",
    multiple=True,
    metavar="SPEC",
    help="Power source spec, repeatable (nvml, nvml:gpus=0). Omitted: auto-detect. 'none': timing only.",
)
@click.option(
    "--out", type=click_out_path(file_okay=False), help="Run directory. Default: runs/<UTC time>-serve-bench."
)
@click.option(
    "--idle",
    "idle_s",
    type=FiniteFloat(min=0),
    default=5.0,
    show_default=True,
    metavar="SECONDS",
    help="Measure the idle power this long before the load (for each request's dynamic energy); 0: none.",
)
@click.option(
    "--request-timeout",
    "request_timeout_s",
    type=FiniteFloat(min=0, min_open=True),
    default=300.0,
    show_default=True,
    metavar="SECONDS",
    help="The longest one request may take, from its send to its end (a stalled stream ends there).",
)
@click.option(
    "--prefill-weight",
    type=FiniteFloat(min=0),
    default=1.0,
    show_default=True,
    help="In the work model, a prompt token's weight against a generated token's (docs/serving.md).",
)
@click.option(
    "--warmup",
    "warmup_requests",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    metavar="N",
    help="Requests sent one by one before measuring.",
)
@click.option(
    "--stream-usage/--no-stream-usage",
    default=True,
    show_default=True,
    help="Ask for token counts in the stream (stream_options); transformers serve refuses the field.",
)
@click.option(
    "--extra-body",
    metavar="JSON",
    help="Fields added to every request, e.g. '{\"ignore_eos\": true}' for vLLM.",
)
@click.option(
    "--reporter",
    "reporters",
    multiple=True,
    metavar="SPEC",
    help="Reporter spec, repeatable (console, csv, json, plot, ...). The console summary is printed unless -q or --reporter none.",
)
@click.pass_context
def serve_bench(
    ctx: click.Context,
    power: tuple[str, ...],
    out: Path | None,
    reporters: tuple[str, ...],
    extra_body: str | None,
    rate: float | None,
    **options,
) -> None:
    """Load an OpenAI-compatible server and measure each request's energy on this machine's GPUs.

    \b
    energyframe serve-bench --url http://127.0.0.1:8000/v1 --model NAME \\
        --prompts synthetic:prompt_tokens=512,output_tokens=128 --requests 200 --rate 4 --power nvml
    """
    from ..kit.registry import power_from_cli
    from ..results.store import default_run_dir
    from .run import serve_bench as run_serve_bench

    if rate is not None and not rate > 0:
        raise click.BadParameter(
            f"must be above 0 (requests per second; inf sends all at once), got {rate:g}",
            param_hint="'--rate'",
        )
    quiet = bool(ctx.obj and ctx.obj.get("quiet"))
    run_serve_bench(
        power=power_from_cli(power),
        out=out or default_run_dir("serve-bench"),
        reporters=_reporter_specs(reporters, quiet),
        extra_body=_extra_body(extra_body),
        rate=rate,
        **options,
    )


def _reporter_specs(reporters: tuple[str, ...], quiet: bool) -> list[str]:
    """The reporters to run: none for ``--reporter none``, and the console summary first unless
    ``-q`` or given."""
    specs = list(reporters)
    if any(r.strip().lower() == "none" for r in specs):
        if len(specs) > 1:
            raise UsageError("--reporter none cannot be combined with other reporters")
        return []
    if not quiet and not any(r.split(":", 1)[0].strip() == "console" for r in specs):
        specs.insert(0, "console")
    return specs


def register_commands(cli: click.Group) -> None:
    """The ``energyframe.commands`` hook: ``energyframe serve-bench``."""
    cli.add_command(serve_bench)
