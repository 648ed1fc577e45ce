"""Prompts from a synthetic spec or a JSONL file (energyframe/serving/prompts.py)."""

import json

import pytest

from energyframe.errors import OptionError, UsageError
from energyframe.serving.prompts import WORDS, load_prompts


def test_synthetic_prompts_have_the_tokens_asked_and_differ():
    prompts = load_prompts("synthetic:prompt_tokens=20,output_tokens=7,seed=3", 5)
    assert [p.request_id for p in prompts] == [f"r{i:05d}" for i in range(5)]
    assert all(len(p.text.split()) == 20 and set(p.text.split()) <= set(WORDS) for p in prompts)
    assert {p.max_tokens for p in prompts} == {7} and {p.prompt_tokens for p in prompts} == {20}
    assert len({p.text for p in prompts}) == 5  # no prefix cache hides a prefill
    assert load_prompts("synthetic:prompt_tokens=20,output_tokens=7,seed=3", 5) == prompts
    same = load_prompts("synthetic:prompt_tokens=20,same=true", 3)
    assert len({p.text for p in same}) == 1


def test_synthetic_needs_a_count_and_valid_options():
    with pytest.raises(UsageError, match=r"needs --requests N"):
        load_prompts("synthetic:prompt_tokens=8", None)
    with pytest.raises(OptionError, match="unknown option 'tokens'"):
        load_prompts("synthetic:tokens=8", 2)


def write(tmp_path, lines):
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


def test_a_jsonl_file(tmp_path):
    path = write(
        tmp_path,
        [
            {"prompt": "hello there", "max_tokens": 4, "id": "a"},
            "",
            {
                "messages": [{"role": "user", "content": "x" * 40}],
                "prompt_tokens": 9,
                "extra": {"temperature": 0},
            },
        ],
    )
    a, b = load_prompts(str(path), None)
    assert (a.request_id, a.text, a.max_tokens, a.prompt_tokens) == ("a", "hello there", 4, 3)
    assert (b.request_id, b.max_tokens, b.prompt_tokens, dict(b.extra)) == (
        "r00001",
        None,
        9,
        {"temperature": 0},
    )
    assert [p.request_id for p in load_prompts(str(path), 5)] == ["a", "r00001", "a.1", "r00001.1", "a.2"]


@pytest.mark.parametrize(
    "lines, message",
    [
        (["{oops"], " line 1: not JSON (Expecting property name enclosed in double quotes)"),
        ([[1]], " line 1: not a JSON object"),
        ([{"text": "x"}], ' line 1: give "prompt" (a string) or "messages" (a list)'),
        (
            [{"prompt": "x", "max_tokens": 0}],
            " line 1: max_tokens must be a whole number of at least 1, got 0",
        ),
        (
            [{"prompt": "x", "arrival_s": -1}],
            " line 1: arrival_s must be a number of seconds of at least 0, got -1",
        ),
        (
            [{"prompt": "x", "id": "a"}, {"prompt": "y", "id": "a"}],
            ": id 'a' is on two lines; each request needs its own",
        ),
        (
            [{"prompt": "x", "arrival_s": 0}, {"prompt": "y"}],
            ": arrival_s is on 1 of 2 lines; give it on all or none",
        ),
        (
            [{"prompt": "x", "extra": [1]}],
            ' line 1: "extra" must be an object (more fields of the request body)',
        ),
    ],
)
def test_bad_files_are_refused_naming_the_line(tmp_path, lines, message):
    path = write(tmp_path, lines)
    with pytest.raises(UsageError) as e:
        load_prompts(str(path), None)
    assert str(e.value) == f"--prompts {path}{message}"


def test_timed_lines_cannot_repeat_and_a_missing_file_says_what_to_give(tmp_path):
    path = write(tmp_path, [{"prompt": "x", "arrival_s": 0}])
    with pytest.raises(UsageError, match="has 1 lines with arrival_s; their times cannot repeat"):
        load_prompts(str(path), 2)
    with pytest.raises(UsageError, match="no such file"):
        load_prompts(str(tmp_path / "none.jsonl"), 1)
