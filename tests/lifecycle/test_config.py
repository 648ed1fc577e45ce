"""Settings vs config: one source of defaults, resolved once, validated before anything starts."""

import dataclasses
import math

import pytest
from click.testing import CliRunner

import energyframe as ef
from energyframe.cli import main
from energyframe.errors import UsageError
from energyframe.lifecycle.config import MAX_SECONDS, SETTINGS, RunConfig, RunSettings
from tests.fakes import ListWorkload, busy_phase


def test_settings_and_config_have_the_same_fields():
    assert [f.name for f in dataclasses.fields(RunSettings)] == [f.name for f in dataclasses.fields(RunConfig)]
    assert all(f.default is None for f in dataclasses.fields(RunSettings))


def test_user_wins_over_workload_over_default():
    config = RunSettings(trials=7).resolve({"trials": 3, "idle_s": 2.0})
    assert config.trials == 7  # the user's
    assert config.idle_s == 2.0  # the workload's
    assert config.warmup_s == RunConfig().warmup_s == 1.0  # the default, written once
    assert config == RunConfig(trials=7, idle_s=2.0)


def test_a_workload_asking_for_an_unknown_setting_is_refused():
    with pytest.raises(UsageError, match=r"unknown run settings \['trails'\]"):
        RunSettings().resolve({"trails": 3})


@pytest.mark.parametrize(
    "name,value,message",
    [
        ("warmup_s", math.inf, "warmup_s must be a finite number, got inf"),
        ("cooldown_s", math.nan, "cooldown_s must be a finite number, got nan"),
        ("min_window_s", 0.0, "min_window_s must be positive, got 0.0"),
        ("idle_s", -1.0, "idle_s must be at least 0, got -1.0"),
        ("guard_s", 1e100, f"guard_s must be at most {MAX_SECONDS:g} s (one day), got 1e+100"),
        ("trials", 0, "trials must be at least 1, got 0"),
        ("trials", 2.5, "trials must be a whole number, got 2.5"),
        ("sync_pulse", "yes", "sync_pulse must be true or false, got 'yes'"),
    ],
)
def test_impossible_values_are_refused_by_name(name, value, message):
    with pytest.raises(UsageError) as info:
        RunSettings(**{name: value})
    assert str(info.value) == message


def test_a_concrete_config_cannot_leave_a_decided_field_unset():
    with pytest.raises(UsageError, match="trials must be set in a RunConfig"):
        RunConfig(trials=None)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--warmup-s", "inf"], "Invalid value for '--warmup-s': must be a finite number, got inf"),
        (["--cooldown", "inf"], "Invalid value for '--cooldown': must be a finite number, got inf"),
        (["--min-window", "nan"], "Invalid value for '--min-window': must be a finite number, got nan"),
        (["--idle", "1e300"], "Invalid value for '--idle': must be at most 86400 s (one day), got 1e+300"),
        (["--trials", "0"], "Invalid value for '--trials': must be at least 1, got 0"),
    ],
)
def test_the_cli_refuses_them_before_anything_starts(tmp_path, args, message):
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["run", "--power", "none", "--workload", "sleep", "--out", str(out), *args])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output
    assert not out.exists()


def test_every_setting_with_a_flag_is_an_option_of_run():
    flags = {f.metadata["flag"] for f in SETTINGS if f.metadata["flag"]}
    options = {opt for p in main.commands["run"].params for opt in getattr(p, "opts", [])}
    assert flags <= options


def test_a_resolved_config_runs_as_given_and_says_what_the_workload_wanted():
    class Wants(ListWorkload):
        def run_defaults(self):
            return {"idle_s": 0.5}

    result = ef.run(Wants([busy_phase()]), power="none", reporters=[],
                    settings=RunConfig(trials=2, min_window_s=0.05, warmup_s=0.0))
    assert result.meta["config"]["idle_s"] == 0.0
    assert any("preferred settings {'idle_s': 0.5} were not applied" in w for w in result.warnings)
    settled = ef.run(Wants([busy_phase()]), power="none", reporters=[],
                     settings=RunSettings(trials=2, min_window_s=0.05, warmup_s=0.0))
    assert settled.meta["config"]["idle_s"] == 0.5
