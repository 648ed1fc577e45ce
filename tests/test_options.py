from pathlib import Path

import pytest

from energyframe.errors import OptionError, UsageError
from energyframe.options import Option, Spec, parse_spec, resolve_options

OPTS = (
    Option("gpus", "list", None, "GPU indices or UUIDs"),
    Option("interval_ms", "float", 1.0, "polling", minimum=0.1),
    Option("batch", "int", 1, "batch size", minimum=1),
    Option("dtype", "choice", "fp16", "type", choices=("fp16", "bf16", "fp32")),
    Option("cold", "bool", False, "flush L2"),
    Option("sizes", "int_list", (256,), "sizes"),
    Option("port", "path", None, "serial port"),
)


@pytest.mark.parametrize(
    "text,name,options",
    [
        ("nvml", "nvml", {}),
        ("nvml:", "nvml", {}),
        ("nvml:gpus=0,1", "nvml", {"gpus": "0,1"}),
        ("nvml:gpus=0,1,interval_ms=2", "nvml", {"gpus": "0,1", "interval_ms": "2"}),
        ("resnet50:batch=64,dtype=fp16", "resnet50", {"batch": "64", "dtype": "fp16"}),
        ("wattsup:port=/dev/ttyUSB0", "wattsup", {"port": "/dev/ttyUSB0"}),
        ("replay:file=C:/x:y.csv", "replay", {"file": "C:/x:y.csv"}),
        (" matmul : M=4096 , K=8 ", "matmul", {"M": "4096", "K": "8"}),
    ],
)
def test_parse_spec(text, name, options):
    spec = parse_spec(text)
    assert spec.name == name
    assert dict(spec.options) == options


@pytest.mark.parametrize(
    "text,message",
    [
        ("", "empty plugin name"),
        (":a=1", "empty plugin name"),
        ("x:=1", "missing option name"),
        ("x:a=1,a=2", "option 'a' given twice"),
        ("x:oops", "cannot parse 'oops'"),
    ],
)
def test_parse_spec_errors(text, message):
    with pytest.raises(UsageError, match=message):
        parse_spec(text)


def test_spec_round_trips_through_str():
    spec = Spec("nvml", {"gpus": (0, 1), "interval_ms": 2.0})
    assert str(spec) == "nvml:gpus=0,1,interval_ms=2"
    assert parse_spec(str(spec)).options == {"gpus": "0,1", "interval_ms": "2"}


def test_resolve_fills_defaults_and_converts():
    values = resolve_options(
        OPTS, {"gpus": "0,1", "batch": "64", "cold": "yes", "sizes": "1,2", "port": "~/p"}, "x"
    )
    assert values == {
        "gpus": ("0", "1"),
        "interval_ms": 1.0,
        "batch": 64,
        "dtype": "fp16",
        "cold": True,
        "sizes": (1, 2),
        "port": Path("~/p").expanduser(),
    }


def test_python_values_are_accepted_and_checked():
    assert resolve_options(OPTS, {"batch": 8, "sizes": [64, 128], "cold": False}, "x")["sizes"] == (64, 128)
    with pytest.raises(OptionError, match="expects an integer"):
        resolve_options(OPTS, {"batch": 2.5}, "x")
    with pytest.raises(OptionError, match="expects an integer"):
        resolve_options(OPTS, {"batch": True}, "x")


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(OptionError) as e:
        resolve_options(OPTS, {"batchsize": "4"}, "workload 'resnet50'")
    assert str(e.value) == (
        "unknown option 'batchsize' for workload 'resnet50'. "
        "Valid options: batch, cold, dtype, gpus, interval_ms, port, sizes"
    )


@pytest.mark.parametrize(
    "given,message",
    [
        ({"batch": "x"}, "option 'batch' of w expects an integer, got 'x'"),
        ({"batch": "0"}, "option 'batch' of w must be >= 1, got 0"),
        ({"interval_ms": "fast"}, "option 'interval_ms' of w expects a number, got 'fast'"),
        ({"dtype": "int8"}, "option 'dtype' of w expects one of fp16, bf16, fp32, got 'int8'"),
        ({"cold": "maybe"}, "option 'cold' of w expects true or false, got 'maybe'"),
        ({"sizes": "1,x"}, "option 'sizes' of w expects comma-separated integers, got '1,x'"),
    ],
)
def test_bad_values_name_the_option_and_what_it_expects(given, message):
    with pytest.raises(OptionError) as e:
        resolve_options(OPTS, given, "w")
    assert str(e.value) == message


def test_required_option():
    with pytest.raises(OptionError, match="w needs option 'file': the file"):
        resolve_options((Option("file", "path", required=True, help="the file"),), {}, "w")


def test_option_declaration_is_checked():
    with pytest.raises(ValueError):
        Option("x", "complex")
    with pytest.raises(ValueError):
        Option("x", "choice")


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e400"])
def test_numbers_that_are_not_finite_are_refused_by_name(text):
    declared = [Option("seconds", "float", 1.0, minimum=0.0), Option("widths", "float_list", None)]
    with pytest.raises(OptionError, match=r"option 'seconds' of workload 'sleep' expects a finite number"):
        resolve_options(declared, {"seconds": text}, "workload 'sleep'")
    with pytest.raises(OptionError, match=r"option 'widths' of workload 'sleep' expects a finite number"):
        resolve_options(declared, {"widths": f"1,{text}"}, "workload 'sleep'")
