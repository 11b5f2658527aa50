"""The standard set of traces (docs/decisions.md): every trace compares the standard policies, the command
writes the table for the whole set, and the doc's table is today's."""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from gpuscale.cli import simulate
from gpuscale.errors import UsageError
from gpuscale.sim import Scenario, run_scenario
from gpuscale.sim.compare import STANDARD_POLICIES, STANDARD_SET, rows, table_markdown
from tests.sim.shipped import parse_shipped

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"
DOC = ROOT / "docs" / "decisions.md"


def cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="gpuscale")
    simulate.register(parser.add_subparsers())
    args = parser.parse_args(["simulate", *argv])
    code: int = args.func(args)
    return code


def _parse(text: str) -> Scenario:
    """A trace of the set, with the files it names read beside it, as the CLI does."""
    return parse_shipped(text)


def _trigger_text(policy: dict[str, object]) -> str:
    return json.dumps(policy.get("scaledObject"))


@pytest.mark.parametrize("name", STANDARD_SET)
def test_every_trace_compares_the_standard_policies(name: str) -> None:
    text = (SCENARIOS / f"{name}.yaml").read_text(encoding="utf-8")
    scenario = _parse(text)
    assert scenario.name == name
    names = [p.name for p in scenario.policies]
    assert [n for n in names if n in STANDARD_POLICIES] == list(STANDARD_POLICIES)
    raw = {p["name"]: p for p in yaml.safe_load(text)["policies"]}
    by = {p.name: p for p in scenario.policies}
    signals = {str(s.signal) for s in by["prometheus-dcgm"].sources}
    assert "sum(gpu_utilization)" in signals and "DCGM_FI_DEV_GPU_UTIL" in _trigger_text(
        raw["prometheus-dcgm"]
    )
    assert "sum(queue)" in {str(s.signal) for s in by["prometheus-vllm-queue"].sources}
    assert "vllm:num_requests_waiting" in _trigger_text(raw["prometheus-vllm-queue"])
    gpu = [s for s in by["gpuscale-gpu"].sources if s.via == "gpuscale"]
    assert gpu and gpu[0].trigger is not None and gpu[0].trigger.metadata is not None
    assert gpu[0].trigger.metadata.metric == "gpu_utilization"
    # the oracle of the set goes through the HPA, at the same syncs as the KEDA policies it is the limit of
    oracle = by["oracle"].oracle
    assert oracle is not None and oracle.controller == "hpa"
    assert by["oracle"].hpa_offset_seconds == by["gpuscale-engine"].hpa_offset_seconds
    assert scenario.workload.max_queue_seconds == 60
    for name, ahead in (("gpuscale-engine", "off"), ("gpuscale-engine-ahead", "auto")):
        engine = [s for s in by[name].sources if s.via == "gpuscale"]
        assert engine and engine[0].trigger is not None and engine[0].trigger.metadata is not None
        md = engine[0].trigger.metadata
        assert (md.metric, md.scale_ahead) == ("request_rate", ahead)
        # 80 % of what a replica serves; llm-step-slow-replica's targets assume 5 where it serves 3
        capacity = 5.0 if scenario.name == "llm-step-slow-replica" else scenario.workload.capacity_per_replica
        assert md.target_value == pytest.approx(0.8 * capacity, abs=0.005)  # as written: to the hundredth


def _doc_table() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    block = re.search(r"<!-- table:begin[^>]*-->\n(.*?)<!-- table:end -->", text, re.S)
    assert block is not None, "docs/decisions.md has no table block"
    return block.group(1).splitlines()


def _doc_rows(trace: str) -> list[str]:
    """The doc table's rows of one trace: from the row that names it to the next that names another."""
    out: list[str] = []
    current = None
    for line in _doc_table()[2:]:
        m = re.match(r"\| `([^`]+)` \|", line)
        if m:
            current = m.group(1)
        if current == trace:
            out.append(line)
    return out


def test_the_docs_table_has_the_headers_and_every_trace_of_the_set_in_order() -> None:
    doc = _doc_table()
    assert doc[:2] == table_markdown([]).splitlines()[:2]
    traces = [m.group(1) for line in doc if (m := re.match(r"\| `([^`]+)` \|", line))]
    assert traces == list(STANDARD_SET)
    assert all(line.startswith("| ") for line in doc[2:])


# diurnal-day (24 h, minutes to simulate) is left out; scripts/sim-set --docs rewrites every row. Each trace
# is its own test (they are independent), under a timeout that covers its simulation (up to about 25 s of
# CPU each here) at least twice over on a slower machine.
@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", [n for n in STANDARD_SET if n != "diurnal-day"])
def test_the_docs_table_is_todays_for_the_trace(name: str) -> None:
    result = run_scenario(_parse((SCENARIOS / f"{name}.yaml").read_text(encoding="utf-8")))
    expected = table_markdown(rows([result])).splitlines()[2:]
    assert _doc_rows(name) == expected, (
        f"docs/decisions.md's rows of {name} differ from the simulator: run scripts/sim-set --docs"
    )


def _short_set(tmp_path: Path, seconds: int = 600) -> Path:
    """The standard set's files, each cut to its first ``seconds`` (the command's path, not the figures)."""
    folder = tmp_path / "set"
    folder.mkdir()
    shutil.copytree(SCENARIOS / "traces", folder / "traces")  # the files the traces name (azure-conv's)
    for name in STANDARD_SET:
        doc = yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text(encoding="utf-8"))
        doc["durationSeconds"] = seconds
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    return folder


@pytest.mark.timeout(120)  # eight traces of 10 minutes with their plots: about 25 s of CPU here
def test_one_command_writes_the_table_for_the_whole_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    folder = _short_set(tmp_path)
    assert cli("--set", str(folder), "--out", str(out)) == 0
    captured = capsys.readouterr()
    printed, err = captured.out, captured.err
    assert printed.splitlines()[0].split() == [
        "trace",
        "policy",
        "unserved",
        "%",
        "s",
        "over",
        "capacity",
        "p95",
        "queueing",
        "delay",
        "s",
        "GPU-hours",
        "direction",
        "changes",
    ]
    table = json.loads((out / "table.json").read_text())
    for name in STANDARD_SET:
        assert [r["policy"] for r in table if r["trace"] == name][:3] == list(STANDARD_POLICIES[:3])
        assert (out / name / "timeline.csv").exists() and (out / name / "plot.png").exists()
        assert any(line.startswith(f"{name} ") for line in printed.splitlines())
    assert (out / "table.md").read_text().startswith("| trace | policy | unserved % |")
    assert (out / "set.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {out / 'table.md'}" in printed
    # one line per trace as it finishes, with its time, on stderr (the table stays alone on stdout)
    progress = err
    for name in STANDARD_SET:
        assert re.search(rf"^{name}: simulated in \d+\.\d s \(\d+/{len(STANDARD_SET)}, ", progress, re.M), (
            progress
        )
    assert len(re.findall(r": simulated in ", progress)) == len(STANDARD_SET)


@pytest.mark.timeout(120)  # the short set twice: about 30 s of CPU here
def test_the_set_in_parallel_gives_the_table_of_one_after_another(tmp_path: Path) -> None:
    folder = _short_set(tmp_path, seconds=300)
    tables = []
    for jobs in ("2", "1"):
        assert cli("--set", str(folder), "--out", str(tmp_path / jobs), "--jobs", jobs) == 0
        tables.append(json.loads((tmp_path / jobs / "table.json").read_text()))
    assert tables[0] == tables[1] and len(tables[0]) >= len(STANDARD_SET) * len(STANDARD_POLICIES)


def test_jobs_is_checked_and_only_with_a_set(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("0", "65", "two"):
        with pytest.raises(SystemExit) as exit_info:
            cli("--set", str(SCENARIOS), "--out", "x", "--jobs", bad)
        assert exit_info.value.code == 2
        assert f'argument --jobs: "{bad}" must be a whole number from 1 to 64' in capsys.readouterr().err
    with pytest.raises(UsageError, match=r"^--jobs 2: only with --set"):
        cli(str(SCENARIOS / "flash-crowd.yaml"), "--out", "x", "--jobs", "2")


def test_one_scenario_prints_its_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert cli(str(SCENARIOS / "flash-crowd.yaml"), "--out", str(tmp_path / "o")) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "flash-crowd:"
    assert lines[1].split()[:3] == ["policy", "unserved", "%"]
    printed = [line.split()[0] for line in lines[2:] if line.strip() and not line.startswith("wrote")]
    assert [p for p in printed if p in STANDARD_POLICIES] == list(STANDARD_POLICIES)
    assert "gpuscale-llm-serving" in printed  # the profile as shipped, beside the standard policies


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--out", "OUT"), "simulate: give a scenario file or --set DIR, not both and not neither"),
        (
            ("SCENARIO", "--set", "SET", "--out", "OUT"),
            "simulate: give a scenario file or --set DIR, not both and not neither",
        ),
        (("--set", "NOWHERE", "--out", "OUT"), '--set "NOWHERE": not a directory'),
        (("--set", "EMPTY", "--out", "OUT"), '--set "EMPTY": llm-step-burst.yaml, flash-crowd.yaml'),
    ],
)
def test_bad_set_arguments_are_usage_errors(tmp_path: Path, argv: tuple[str, ...], message: str) -> None:
    (tmp_path / "empty").mkdir()
    subs = {
        "OUT": str(tmp_path / "out"),
        "SCENARIO": str(SCENARIOS / "llm-step-burst.yaml"),
        "SET": str(SCENARIOS),
        "NOWHERE": str(tmp_path / "nowhere"),
        "EMPTY": str(tmp_path / "empty"),
    }
    with pytest.raises(UsageError) as info:
        cli(*(subs.get(a, a) for a in argv))
    assert str(info.value).startswith(
        message.replace("NOWHERE", subs["NOWHERE"]).replace("EMPTY", subs["EMPTY"])
    )
    assert not (tmp_path / "out").exists()


def test_a_bad_file_in_the_set_names_the_file_and_the_field(tmp_path: Path) -> None:
    folder = _short_set(tmp_path)
    bad = folder / "steep-ramp.yaml"
    bad.write_text(bad.read_text().replace("maxQueueSeconds: 60", "maxQueueSeconds: -1"))
    with pytest.raises(UsageError) as info:
        cli("--set", str(folder), "--out", str(tmp_path / "out"))
    assert str(info.value) == (
        f'{bad}: 1 problem\n  workload.maxQueueSeconds: value "-1" must be an integer >= 0 and <= 86400'
    )
