"""Bad input, as a new user gives it: every file a command reads, whatever its bytes, and every number or
address out of range is one line naming the flag (or the file), the value and what is allowed, and exit 2;
never a traceback, a hang or a flood of log lines. The commands that serve or run on (agent, scaler, demo,
probe of many GPUs) run as a subprocess, with a timeout; the others through ``main``."""

from __future__ import annotations

import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gpuscale.cli import main

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "keda-averagevalue-trap.yaml"
NOT_UTF8 = b"apiVersion: v1\nkind: \xff\xfe Config\n"  # a Latin-1 or binary file, at byte 21 (line 2)
WHY = "not UTF-8 text (byte 0xff at offset 21, line 2)"


def _free() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def _ports() -> list[str]:
    return ["--grpc-address", _free(), "--metrics-address", _free()]


def gpuscale(*argv: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuscale", "--log-level", "error", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    code = main(list(argv))
    return code, capsys.readouterr().err.splitlines()


def agent(*argv: str) -> list[str]:
    return ["agent", "--backend", "mock", "--node-name", "n", *_ports(), *argv]


def scaler(*argv: str) -> list[str]:
    return ["scaler", "--agents", "127.0.0.1:1", *_ports(), *argv]


# -- files: one helper reads them all ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (agent("--kubeconfig", "{f}"), f'--kubeconfig "{{f}}": cannot read it: {WHY}'),
        (scaler("--kubeconfig", "{f}"), f'--kubeconfig "{{f}}": cannot read it: {WHY}'),
        (scaler("--profiles", "{f}"), f"--profiles {{f}}: cannot read the file: {WHY}"),
    ],
    ids=["agent --kubeconfig", "scaler --kubeconfig", "scaler --profiles"],
)
def test_a_served_command_refuses_a_file_that_is_not_utf8(argv: list[str], line: str, tmp_path: Path) -> None:
    f = tmp_path / "file.yaml"
    f.write_bytes(NOT_UTF8)
    run = gpuscale(*(a.replace("{f}", str(f)) for a in argv))
    assert run.returncode == 2, run.stderr
    assert run.stderr.splitlines() == ["gpuscale: error: " + line.replace("{f}", str(f))]


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["simulate", "{f}", "--out", "{out}"], f'scenario "{{f}}": cannot read it: {WHY}'),
        (
            ["simulate", "--profiles", "{f}", str(SCENARIO), "--out", "{out}"],
            f"--profiles {{f}}: cannot read the file: {WHY}",
        ),
        (
            ["probe", "--backend", "mock", "--mock-pattern", "trace:{f}"],
            f'mock pattern "trace:{{f}}": cannot read trace file {{f}}: {WHY}',
        ),
        (
            ["render", "scaledobject", "--target", "deployment/x", "--namespace", "n", "--profiles", "{f}"],
            f"--profiles {{f}}: cannot read the file: {WHY}",
        ),
    ],
    ids=["simulate FILE", "simulate --profiles", "probe --mock-pattern trace:", "render --profiles"],
)
def test_a_file_that_is_not_utf8_is_one_line_and_exit_2(
    argv: list[str], line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "file"
    f.write_bytes(NOT_UTF8)
    given = [a.replace("{f}", str(f)).replace("{out}", str(tmp_path / "out")) for a in argv]
    assert run_main(capsys, *given) == (2, ["gpuscale: error: " + line.replace("{f}", str(f))])


def test_a_demand_csv_that_is_not_utf8_is_a_problem_of_its_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "d.csv").write_bytes(b"t,demand\n0,\xe9\n")
    scenario = SCENARIO.read_text(encoding="utf-8")
    head, _, rest = scenario.partition("\ndemand:")
    policies = rest[rest.index("\npolicies:") :]
    (tmp_path / "s.yaml").write_text(
        f"{head}\ndemand: {{shape: csv, file: d.csv}}{policies}", encoding="utf-8"
    )
    code, err = run_main(capsys, "simulate", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out"))
    assert (code, err) == (
        2,
        [
            f"gpuscale: error: {tmp_path / 's.yaml'}: 1 problem",
            '  demand.file: cannot read "d.csv": not UTF-8 text (byte 0xe9 at offset 11, line 2)',
        ],
    )


@pytest.mark.parametrize(
    "data",
    [b"\xff\xfe0\x001\x00", b"caf\xc3", b"\x00\x01\x02\x80\x81", b"\xef\xbb\xbf\xff"],
    ids=["utf-16", "truncated", "binary", "bom-then-junk"],
)
@pytest.mark.parametrize("command", ["simulate", "probe", "render"])
def test_whatever_the_bytes_no_traceback(
    command: str, data: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "file"
    f.write_bytes(data)
    argv = {
        "simulate": ["simulate", str(f), "--out", str(tmp_path / "out")],
        "probe": ["probe", "--backend", "mock", "--mock-pattern", f"trace:{f}"],
        "render": ["render", "hpa", "--target", "deployment/x", "--namespace", "n", "--profiles", str(f)],
    }[command]
    code, err = run_main(capsys, *argv)
    assert code == 2
    assert err[0].startswith("gpuscale: error: ") and "cannot read" in err[0] and len(err) == 1, err


def test_a_byte_order_mark_is_not_part_of_the_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "trace.csv"
    f.write_bytes(b"\xef\xbb\xbf0,10\n5,20\n")  # as Excel writes CSV UTF-8
    assert run_main(capsys, "probe", "--backend", "mock", "--mock-pattern", f"trace:{f}", "--json")[0] == 0


# -- numbers: bounded, each bound named ---------------------------------------------------------------------

MIG_80GB = "1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["probe", "--backend", "mock", "--mock-gpus", "100000000"],
            '--mock-gpus "100000000" must be from 1 to 64',
        ),
        (agent("--interval", "inf"), '--interval "inf" must be from 0.1 to 60 seconds'),
        (agent("--interval", "0.000001"), '--interval "0.000001" must be from 0.1 to 60 seconds'),
        (agent("--interval", "nan"), '--interval "nan" must be from 0.1 to 60 seconds'),
        (agent("--history", "inf"), '--history "inf" must be a finite number of seconds'),
        (scaler("--forget-after", "inf"), '--forget-after "inf" must be a finite number of seconds'),
        (
            ["demo", "--duration", "1e12", "--out", "{out}"],
            '--duration "1e+12" must be from 15 to 86400 seconds',
        ),
    ],
    ids=[
        "mock-gpus",
        "interval-inf",
        "interval-tiny",
        "interval-nan",
        "history-inf",
        "forget-after-inf",
        "demo",
    ],
)
def test_an_absurd_number_that_would_run_on_is_refused(argv: list[str], line: str, tmp_path: Path) -> None:
    run = gpuscale(*(a.replace("{out}", str(tmp_path / "out")) for a in argv))
    assert run.returncode == 2, run.stderr
    assert run.stderr.splitlines() == [f"gpuscale: error: {line}"]


SO = ["render", "scaledobject", "--target", "deployment/x", "--namespace", "n"]
HPA = ["render", "hpa", "--target", "deployment/x", "--namespace", "n"]
INT32 = 2147483647


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["probe", "--backend", "mock", "--mock-gpus", "65"], '--mock-gpus "65" must be from 1 to 64'),
        (["probe", "--backend", "mock", "--mock-gpus", "0"], '--mock-gpus "0" must be from 1 to 64'),
        (
            ["probe", "--backend", "mock", "--mock-mig", "99g.1000gb"],
            f'--mock-mig "99g.1000gb": "99g.1000gb" is not a MIG profile of the NVIDIA H100 80GB HBM3; '
            f"its profiles: {MIG_80GB}",
        ),
        (
            ["probe", "--backend", "mock", "--mock-model", "h200", "--mock-mig", "3g.40gb"],
            '--mock-mig "3g.40gb": "3g.40gb" is not a MIG profile of the NVIDIA H200; its profiles: 1g.18gb, '
            "1g.18gb+me, 1g.35gb, 2g.35gb, 3g.71gb, 4g.71gb, 7g.141gb",
        ),
        (
            ["probe", "--backend", "mock", "--mock-mig", "7g.80gb,1g.10gb"],
            '--mock-mig "7g.80gb,1g.10gb": 2 instances take 8 compute and 9 memory slices; one NVIDIA H100 '
            "80GB HBM3 has 7 and 8",
        ),
        (
            ["probe", "--backend", "mock", "--mock-mig", "1g.10gb+me,1g.10gb+me"],
            '--mock-mig "1g.10gb+me,1g.10gb+me": at most one +me instance: a GPU has one set of media engines',
        ),
        (
            ["probe", "--backend", "mock", "--mock-model", "l4", "--mock-mig", "1g.10gb"],
            '--mock-mig "1g.10gb": the NVIDIA L4 has no MIG (models with MIG: a100, h100, h200)',
        ),
        (
            [*SO, "--max-replicas", "99999999999999"],
            f'--max-replicas "99999999999999" must be from 1 to {INT32}',
        ),
        (
            [*HPA, "--max-replicas", "99999999999999"],
            f'--max-replicas "99999999999999" must be from 1 to {INT32}',
        ),
        (
            [*SO, "--polling-interval", "2147483648"],
            f'--polling-interval "2147483648" must be from 1 to {INT32}',
        ),
        (
            [*SO, "--cooldown-period", "2147483648"],
            f'--cooldown-period "2147483648" must be from 0 to {INT32}',
        ),
        (
            [*SO, "--scale-down-stabilization", "3601"],
            '--scale-down-stabilization "3601" must be from 0 to 3600',
        ),
        (
            [*HPA, "--scale-down-stabilization", "-1"],
            '--scale-down-stabilization "-1" must be from 0 to 3600',
        ),
        (
            [*SO, "--fallback-replicas", "2", "--fallback-failure-threshold", "2147483648"],
            f'--fallback-failure-threshold "2147483648" must be from 1 to {INT32}',
        ),
    ],
    ids=lambda v: " ".join(v[-2:]) if isinstance(v, list) else "",
)
def test_a_number_out_of_range_is_one_line_and_exit_2(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_main(capsys, *argv) == (2, [f"gpuscale: error: {line}"])


def test_a_real_mig_layout_is_taken(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["probe", "--backend", "mock", "--mock-mig", "3g.40gb,2g.20gb,1g.10gb+me,1g.10gb", "--json"])
    assert code == 0
    assert capsys.readouterr().out.count('"mig_profile": "1g.10gb+me"') == 1


# -- addresses ------------------------------------------------------------------------------------------------

URL = "must be an http:// or https:// URL with a host, e.g. http://prometheus-operated.monitoring.svc:9090"


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            [*SO, "--scaler-address", "foo"],
            '--scaler-address "foo" must be HOST:PORT, e.g. [::]:6000, 0.0.0.0:6000 or gpuscale-agent.gpuscale:6000',
        ),
        (
            [*SO, "--scaler-address", "scaler:99999"],
            '--scaler-address "scaler:99999" must be HOST:PORT, e.g. [::]:6000, 0.0.0.0:6000 or '
            "gpuscale-agent.gpuscale:6000",
        ),
        (
            [*SO, "--mode", "prometheus", "--prometheus-url", "not a url"],
            f'--prometheus-url "not a url" {URL}',
        ),
        (
            [*SO, "--mode", "prometheus", "--prometheus-url", "ftp://p:21"],
            f'--prometheus-url "ftp://p:21" {URL}',
        ),
        ([*SO, "--mode", "prometheus", "--prometheus-url", "http://"], f'--prometheus-url "http://" {URL}'),
        (
            [*SO, "--mode", "prometheus", "--prometheus-url", "http://p:99999"],
            f'--prometheus-url "http://p:99999" {URL}',
        ),
    ],
    ids=["no-port", "bad-port", "not-a-url", "ftp", "no-host", "url-bad-port"],
)
def test_a_render_address_is_checked(argv: list[str], line: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(capsys, *argv) == (2, [f"gpuscale: error: {line}"])


# -- TLS to the agents: checked at start, as the agent checks its own --tls-cert ----------------------------


@pytest.mark.parametrize("which", ["--agent-tls-ca", "--agent-tls-cert"])
def test_a_scaler_agent_tls_file_that_is_not_pem_is_one_line_and_exit_2(which: str, tmp_path: Path) -> None:
    from tests.scaler.certs import make_pki

    pki = make_pki(tmp_path)
    bad = tmp_path / "malformed.yaml"
    bad.write_text("foo: bar\n")
    files = {"--agent-tls-ca": pki.ca, "--agent-tls-cert": pki.client_cert, "--agent-tls-key": pki.client_key}
    files[which] = bad
    run = gpuscale(*scaler(*(x for flag, path in files.items() for x in (flag, str(path)))))
    assert run.returncode == 2, run.stderr
    (line,) = run.stderr.splitlines()
    if which == "--agent-tls-ca":
        assert line.startswith(f"gpuscale: error: --agent-tls-ca {bad}: not a PEM CA bundle ("), line
    else:
        assert line.startswith(
            f"gpuscale: error: --agent-tls-cert {bad} and --agent-tls-key {pki.client_key}: not a PEM "
            "certificate and its unencrypted private key ("
        ), line


# -- an address in use: gpuscale's line, and only it (no gRPC C-core log line before it) -------------------


@pytest.mark.parametrize("command", ["agent", "scaler"])
def test_a_grpc_address_in_use_is_the_only_line(command: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        head = ["agent", "--backend", "mock", "--node-name", "n"] if command == "agent" else scaler()[:3]
        run = gpuscale(*head, "--grpc-address", f"127.0.0.1:{port}", "--metrics-address", _free())
    assert run.returncode == 2, run.stderr
    assert run.stderr.splitlines() == [
        f"gpuscale: error: --grpc-address 127.0.0.1:{port}: cannot listen there (Address already in use); "
        "is another process using the port, or is the address not this host's?"
    ]


# -- render's "Generated by": the command that writes the same file ---------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        [
            *SO,
            "--max-replicas",
            "8",
            "--fallback-replicas",
            "4",
            "--profile",
            "online-inference",
            "-o",
            "{out}",
        ],
        [*SO, "--mode=prometheus", "--max-replicas=6", "--pod-regex", "x-[0-9]+", "--output={out}"],
        [*SO, "--pod-selector", "app in (a, b)", "--min-replicas", "0", "--cooldown-period", "60", "-o{out}"],
        [*HPA, "--max-replicas", "12", "--scale-down-stabilization", "120", "--out", "{out}"],
    ],
    ids=["fallback", "prometheus", "quoted", "hpa"],
)
def test_the_generated_by_command_writes_the_same_file(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out.yaml"
    assert main([a.replace("{out}", str(out)) for a in argv]) == 0
    written = out.read_text(encoding="utf-8")
    (line,) = [x for x in written.splitlines() if x.startswith("# Generated by: ")]
    command = shlex.split(line.removeprefix("# Generated by: "))
    assert command[0] == "gpuscale" and str(out) not in line
    flags = [a.split("=")[0] for a in argv if a.startswith("--") and not a.startswith(("--out", "--output"))]
    assert all(f in command or any(c.startswith(f + "=") for c in command) for f in flags), (flags, command)
    capsys.readouterr()
    assert main(command[1:]) == 0
    assert capsys.readouterr().out == written
