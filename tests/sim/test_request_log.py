"""Request logs: the two formats, the scales, the seed, and one line for a bad row whatever the bytes."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from gpuscale.cli.simulate_requests import iter_lines
from gpuscale.sim import ScenarioError, parse_scenario
from gpuscale.sim.requests import Request, RequestLog, RequestLogError, log_stats, per_second, read_requests

AZURE = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:15:46.5000000,374,44\n2023-11-16 18:15:47.0000000,396,109\n2023-11-16 18:15:49.2500000,10,5\n"
)
PLAIN = "seconds,prompt_tokens,output_tokens,model\n0.5,100,10,a\n1.25,200,20,b\n3,300,30,a\n"


def read(text: str, **options: object) -> list[Request]:
    return list(read_requests(io.StringIO(text), RequestLog("log.csv", **options)))  # type: ignore[arg-type]


def error(text: str, **options: object) -> str:
    with pytest.raises(RequestLogError) as info:
        read(text, **options)
    return str(info.value)


def test_the_azure_format_counts_from_the_first_timestamp() -> None:
    assert read(AZURE) == [Request(0.0, 374, 44), Request(0.5, 396, 109), Request(2.75, 10, 5)]
    assert read(AZURE, format="azure") == read(AZURE)


def test_the_plain_format_keeps_its_seconds_and_a_model_column_filters() -> None:
    assert read(PLAIN) == [Request(0.5, 100, 10), Request(1.25, 200, 20), Request(3.0, 300, 30)]
    assert read(PLAIN, model="a") == [Request(0.5, 100, 10), Request(3.0, 300, 30)]
    assert read(" prompt_tokens,output_tokens,seconds\n5,6,7\n") == [Request(7.0, 5, 6)]


def test_time_scale_stretches_and_rate_scale_resamples() -> None:
    assert [r.arrival for r in read(PLAIN, time_scale=2)] == [1.0, 2.5, 6.0]
    assert read(PLAIN, rate_scale=2) == [r for r in read(PLAIN) for _ in range(2)]


def test_a_fractional_rate_scale_is_drawn_from_the_seed() -> None:
    rows = "seconds,prompt_tokens,output_tokens\n" + "".join(f"{i},1,1\n" for i in range(1000))
    half = read(rows, rate_scale=0.5, seed=1)
    assert half == read(rows, rate_scale=0.5, seed=1)
    assert half != read(rows, rate_scale=0.5, seed=2)
    assert 450 < len(half) < 550
    assert 1400 < len(read(rows, rate_scale=1.5, seed=1)) < 1600


def test_requests_are_grouped_by_second_and_counted() -> None:
    seconds = list(per_second(read(PLAIN), 5))
    assert [len(s) for s in seconds] == [1, 1, 0, 1, 0]
    stats = log_stats(io.StringIO(PLAIN), RequestLog("log.csv"), 3)
    assert stats.counts == (1.0, 1.0, 0.0) and stats.requests == 3
    assert stats.mean_prompt == 200 and stats.mean_output == 20


@pytest.mark.parametrize(
    ("text", "options", "expected"),
    [
        (
            "seconds,prompt_tokens,output_tokens\n0,10,-3\n",
            {},
            '"log.csv" line 2, column "output_tokens": value "-3" must be a whole number of tokens >= 0',
        ),
        (
            "seconds,prompt_tokens,output_tokens\n0,1.5,3\n",
            {},
            '"log.csv" line 2, column "prompt_tokens": value "1.5" must be a whole number of tokens >= 0',
        ),
        (
            "seconds,prompt_tokens,output_tokens\n0,1,3\nnan,1,3\n",
            {},
            '"log.csv" line 3, column "seconds": value "nan" must be a number of seconds >= 0',
        ),
        (
            "seconds,prompt_tokens,output_tokens\n5,1,3\n4,1,3\n",
            {},
            '"log.csv" line 3, column "seconds": value "4" must be in arrival order: not before the row '
            "above (5 s)",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n",
            {},
            '"log.csv" line 2, column "TIMESTAMP": value "yesterday" must be a timestamp such as '
            "2023-11-16 18:15:46.6805900",
        ),
        (
            "t,prompt,output\n0,1,1\n",
            {},
            '"log.csv" line 1: header [t, prompt, output] is neither the azure format '
            "(TIMESTAMP,ContextTokens,GeneratedTokens) nor the plain one (seconds,prompt_tokens,output_tokens)",
        ),
        (
            "seconds,prompt_tokens,output_tokens\n0,1,1\n",
            {"format": "azure"},
            '"log.csv" line 1: the azure format needs the columns TIMESTAMP,ContextTokens,GeneratedTokens; '
            "found [seconds, prompt_tokens, output_tokens]",
        ),
        (
            "seconds,prompt_tokens,output_tokens\n0,1\n",
            {},
            '"log.csv" line 2: 2 columns, the header has 3',
        ),
        (
            "",
            {},
            '"log.csv": empty; a request log starts with a header, e.g. seconds,prompt_tokens,output_tokens',
        ),
        (
            "seconds,prompt_tokens,output_tokens\n0,1,1\n",
            {"model": "a"},
            '"log.csv" line 1: demand.model is "a" but the log has no model column',
        ),
    ],
)
def test_a_bad_row_is_one_line(text: str, options: dict[str, object], expected: str) -> None:
    assert error(text, **options) == expected


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            b"seconds,prompt_tokens,output_tokens\n0,1,1\n1,\xff\xfe,1\n",
            '"log.csv" line 3: not UTF-8 text (byte 0xff)',
        ),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", '"log.csv" line 1: not UTF-8 text (byte 0x89)'),
        (
            b"seconds,prompt_tokens,output_tokens\n0,1,1\x00\n",
            '"log.csv" line 2, column "output_tokens": value "1\x00" must be a whole number of tokens >= 0',
        ),
        (b'seconds,prompt_tokens,output_tokens\n0,"1,1\n', '"log.csv" line 2: 2 columns, the header has 3'),
    ],
)
def test_any_bytes_give_one_line_never_a_traceback(tmp_path: Path, data: bytes, expected: str) -> None:
    path = tmp_path / "log.csv"
    path.write_bytes(data)
    with pytest.raises(RequestLogError) as info:
        list(read_requests(iter_lines(path), RequestLog("log.csv")))
    assert str(info.value) == expected


def _scenario(demand: str, workload: str = "{tokens: {preset: llama-3.3-70b-fp8-2xh100}}") -> str:
    return f"""
name: s
durationSeconds: 10
workload: {workload}
demand: {demand}
policies:
  - name: o
    oracle: {{maxReplicas: 4}}
"""


def _problems(text: str, files: dict[str, str]) -> tuple[str, ...]:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text, open_lines=lambda name: io.StringIO(files[name]))
    return info.value.problems


def test_a_scenario_names_the_bad_row_under_demand_file() -> None:
    bad = "seconds,prompt_tokens,output_tokens\n0,x,1\n"
    assert _problems(_scenario("{shape: requests, file: log.csv}"), {"log.csv": bad}) == (
        'demand.file: "log.csv" line 2, column "prompt_tokens": value "x" must be a whole number of tokens >= 0',
    )


def test_a_request_log_defaults_to_the_token_model_with_a_derived_capacity() -> None:
    scenario = parse_scenario(
        _scenario("{shape: requests, file: log.csv, rateScale: 2}"),
        open_lines=lambda name: io.StringIO(PLAIN),
    )
    wl = scenario.workload
    assert wl.replica_model == "tokens" and wl.tokens is not None
    assert wl.tokens.preset == "llama-3.3-70b-fp8-2xh100"
    assert wl.capacity_per_replica > 1
    assert [scenario.demand.at(t) for t in range(4)] == [2, 2, 0, 2]


@pytest.mark.parametrize(
    ("demand", "workload", "expected"),
    [
        (
            "{shape: constant, value: 1}",
            "{replicaModel: tokens, tokens: {preset: llama-3.3-70b-fp8-2xh100}}",
            'workload.replicaModel: value "tokens" must be requests with this demand (the token model needs '
            "demand.shape: requests, a request log)",
        ),
        (
            "{shape: requests, file: log.csv}",
            "{}",
            "workload.tokens: is required with replicaModel tokens: a preset (one of [llama-3.3-70b-fp8-2xh100]) "
            "or prefillTokensPerSecond, decodeStepSeconds, decodeStepSecondsPerSequence, maxNumSeqs and "
            "kvCacheTokens",
        ),
        (
            "{shape: requests, file: log.csv}",
            "{tokens: {preset: gpt-5}}",
            'workload.tokens.preset: value "gpt-5" must be one of [llama-3.3-70b-fp8-2xh100]',
        ),
        (
            "{shape: requests, file: log.csv, rateScale: 0}",
            "{tokens: {preset: llama-3.3-70b-fp8-2xh100, maxNumSeqs: 0}}",
            'workload.tokens.maxNumSeqs: value "0" must be an integer >= 1',
        ),
    ],
)
def test_token_model_fields_are_checked(demand: str, workload: str, expected: str) -> None:
    assert expected in _problems(_scenario(demand, workload), {"log.csv": PLAIN})
