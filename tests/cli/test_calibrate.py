"""``gpuscale calibrate`` against the mock vLLM engine, whose figures are known: its prefill
(``prompt_tokens / prefill_s``), its decode step (``itl_s x (1 + batch / max_num_seqs)``: ``itl_s x (1 + 1 /
max_num_seqs)`` at one sequence, ``itl_s / max_num_seqs`` a sequence more). Served over HTTP on port 0 under a
load the test sets (its ``demand``), with a fake clock the command's sleep advances, so a minute's window
takes milliseconds and the same figures come out every run; once more in real time through ``main``. Each
figure is held to the mock's within ``TOLERANCE``; the block it writes is read back by the simulator's own
scenario parser. Saved bodies give the same figures; every bad input is one line and exit code 2."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from aiohttp import web

from gpuscale.backends.mock_engine import MockEngine, MockEngineConfig, start_mock_engine
from gpuscale.calibrate import FINISHED, Given, Reading, Window
from gpuscale.calibrate import calibrate as calibrate_windows
from gpuscale.cli import build_parser, main
from gpuscale.cli.calibrate import run_async
from tests.calibrated import load_block

T0 = 1_700_000_000.0
ITL = "vllm:inter_token_latency_seconds"
MOCK = MockEngineConfig()  # 32 sequences, 4 s a request, 512 prompt tokens in 0.08 s, ITL 0.02 s at batch 0
PREFILL = MOCK.prompt_tokens / MOCK.prefill_s  # 6400 tokens/s
STEP = MOCK.itl_s * (1 + 1 / MOCK.max_num_seqs)  # 0.020625 s
SLOPE = MOCK.itl_s / MOCK.max_num_seqs  # 0.000625 s a sequence
TOLERANCE = 0.01  # relative, every derived figure against the mock's (fake clock and saved bodies)
REAL_TIME_TOLERANCE = 0.05  # relative, the batch and step measured over a real 1.5 s window
KV_BLOCKS = 1000  # written into vllm:cache_config_info where a test says the engine exposes it


def comments(block: str) -> dict[str, str]:
    """Each figure's comment, by its key."""
    return dict(re.findall(r"^  (\w+): \S+  # (.*)$", block, re.M))


def bodies(
    demand: Callable[[float], float], times: tuple[float, ...], start: float = 0.0, **config: object
) -> list[str]:
    """The /metrics of a mock started at ``T0 + start``, at ``T0 + t`` for each of ``times``."""
    clock = [T0 + start]
    engine = MockEngine(MockEngineConfig(**config), demand, clock=lambda: clock[0])  # type: ignore[arg-type]
    out = []
    for t in times:
        clock[0] = T0 + t
        out.append(engine.exposition()[0].decode())
    return out


def with_blocks(body: str) -> str:
    return body.replace('num_gpu_blocks="None"', f'num_gpu_blocks="{KV_BLOCKS}"')


class FakeTime:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


async def calibrate(clock: FakeTime, *argv: str) -> int:
    args = build_parser(["calibrate"]).parse_args(["calibrate", *argv])
    return await run_async(args, clock=clock, sleep=clock.sleep)


async def test_two_windows_of_the_mock_give_its_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """2 requests/s for 100 s (a batch of 8), then 6 (24): one --engine window in each, the first saved with
    --save and given back as --before/--after. Every figure is the mock's within 1 %, and the block loads."""
    clock = FakeTime()
    engine = MockEngine(MOCK, lambda t: 2.0 if t < 100 else 6.0, clock=clock)
    server = await start_mock_engine(engine)
    try:
        clock.now = T0 + 40
        first = tmp_path / "first"
        assert await calibrate(clock, "--engine", server.url, "--save", str(first), "--partial") == 0
        partial = capsys.readouterr().out
        clock.now = T0 + 140
        argv = ["--before", str(first / "before.txt"), "--after", str(first / "after.txt")]
        flags = ["--max-num-seqs", "32", "--kv-cache-tokens", "20000", "--out", str(tmp_path / "p.yaml")]
        assert await calibrate(clock, *argv, "--engine", server.url.removesuffix("/metrics"), *flags) == 0
    finally:
        await server.close()
    block = (tmp_path / "p.yaml").read_text()
    params = load_block(block)
    assert params.prefill_tokens_per_second == pytest.approx(PREFILL, rel=TOLERANCE)
    assert params.decode_step_seconds == pytest.approx(STEP, rel=TOLERANCE)
    assert params.decode_step_seconds_per_sequence == pytest.approx(SLOPE, rel=TOLERANCE)
    assert (params.max_num_seqs, params.kv_cache_tokens) == (32, 20000)
    said = comments(block)
    assert said["prefillTokensPerSecond"].startswith(
        "window 1: vllm:request_prompt_tokens_sum over vllm:request_prefill_time_seconds_sum"
    )
    assert said["decodeStepSeconds"].startswith(
        "the line through step(8) = 0.025 s in window 1, step(24) = 0.035 s"
    )
    assert "vllm:inter_token_latency_seconds mean" in said["decodeStepSeconds"]
    assert said["decodeStepSeconds"].endswith(
        "(step: vllm:inter_token_latency_seconds mean; batch: vllm:num_requests_running over 61 readings, each "
        "weighted by its value)"
    )
    assert said["maxNumSeqs"] == "--max-num-seqs" and said["kvCacheTokens"] == "--kv-cache-tokens"
    assert (
        f'# window 2: --engine "{server.url}" (60 s): 360 requests finished, batch 24, step 0.035 s' in block
    )
    # the first window alone: the prefill, and a comment for each figure it cannot give
    assert re.search(r"^  prefillTokensPerSecond: 6400  # window 1", partial, re.M)
    assert [k for k in re.findall(r"^  # (\w+): missing: ", partial, re.M)] == [
        "decodeStepSeconds",
        "decodeStepSecondsPerSequence",
        "maxNumSeqs",
        "kvCacheTokens",
    ]
    assert (
        (first / "before.txt").read_text().startswith("# gpuscale calibrate: scraped at 1700000040.000 from ")
    )


async def test_one_window_names_each_missing_figure_and_how_to_give_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    clock = FakeTime()
    server = await start_mock_engine(MockEngine(MOCK, lambda t: 2.0, clock=clock))
    try:
        clock.now = T0 + 40
        assert await calibrate(clock, "--engine", server.url) == 2
    finally:
        await server.close()
    captured = capsys.readouterr()
    assert captured.out == ""
    more = (
        "a window at another concurrency (--before and --after of a saved window, or --engine under another load; "
        "--save DIR keeps an --engine window's bodies)"
    )
    assert captured.err.splitlines() == [
        "gpuscale: error: calibrate: decodeStepSeconds is missing: one concurrency measured (step(8) = 0.025 s in "
        f"window 1): the step of one sequence needs {more}",
        "gpuscale: error: calibrate: decodeStepSecondsPerSequence is missing: one concurrency measured (step(8) = "
        f"0.025 s in window 1): the slope needs {more}",
        "gpuscale: error: calibrate: maxNumSeqs is missing: vLLM does not expose it; give --max-num-seqs N (the "
        "engine's --max-num-seqs, the most sequences it runs at once)",
        'gpuscale: error: calibrate: kvCacheTokens is missing: vllm:cache_config_info has num_gpu_blocks "None"; '
        'give --kv-cache-tokens N (vLLM logs it at start: "GPU KV cache size: N tokens")',
    ]


async def test_the_command_measures_a_real_window(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Through ``main``, in real time: the mock at 16 requests/s of 0.5 s (a batch of 8), a 1.5 s window."""
    engine = MockEngine(MockEngineConfig(service_time_s=0.5), lambda t: 16.0)
    server = await start_mock_engine(engine)
    out = tmp_path / "p.yaml"
    try:
        await asyncio.sleep(1.0)  # the batch fills in one service time
        argv = ["--log-level", "info", "calibrate", "--engine", server.url, "--seconds", "1.5", "--partial"]
        assert await asyncio.to_thread(main, [*argv, "--out", str(out)]) == 0
    finally:
        await server.close()
    block = out.read_text()
    assert re.search(r"^  prefillTokensPerSecond: 6400  # ", block, re.M), block
    found = re.search(r"\(1\.5\d* s\): \d+ requests finished, batch ([0-9.]+), step ([0-9.]+) s", block)
    assert found is not None, block
    assert float(found[1]) == pytest.approx(8, rel=REAL_TIME_TOLERANCE)
    assert float(found[2]) == pytest.approx(MOCK.itl_s * (1 + 8 / 32), rel=REAL_TIME_TOLERANCE)


def test_saved_bodies_give_the_same_figures_and_the_cache_from_its_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two windows saved with curl (no scrape time: --seconds gives their length); the engine says its KV
    cache in vllm:cache_config_info (num_gpu_blocks x block_size)."""
    low = bodies(lambda t: 2.0, (40, 100))
    high = bodies(lambda t: 6.0, (40, 100))
    for name, text in zip(("l1", "l2", "h1", "h2"), (*low, *high), strict=True):
        (tmp_path / name).write_text(with_blocks(text))
    argv = ["calibrate", "--seconds", "60", "--max-num-seqs", "32"]
    for a, b in (("l1", "l2"), ("h1", "h2")):
        argv += ["--before", str(tmp_path / a), "--after", str(tmp_path / b)]
    assert main(argv) == 0
    block = capsys.readouterr().out
    params = load_block(block)
    assert params.prefill_tokens_per_second == pytest.approx(PREFILL, rel=TOLERANCE)
    assert params.decode_step_seconds == pytest.approx(STEP, rel=TOLERANCE)
    assert params.decode_step_seconds_per_sequence == pytest.approx(SLOPE, rel=TOLERANCE)
    assert params.kv_cache_tokens == KV_BLOCKS * MOCK.block_size
    assert comments(block)["kvCacheTokens"] == (
        f'vllm:cache_config_info num_gpu_blocks 1000 x block_size 16 (--after "{tmp_path / "h2"}")'
    )


def test_without_the_prefill_histogram_the_prefill_is_from_the_time_to_first_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A vLLM without vllm:request_prefill_time_seconds: the mean prompt over the mean TTFT less the mean
    queue time (the mock queues nothing below its capacity). Without a length, the batch is the running
    gauge's mean at the two ends."""
    for name, text in zip(("a", "b"), bodies(lambda t: 1.0, (40, 100)), strict=True):
        kept = [
            line for line in text.splitlines(keepends=True) if "vllm:request_prefill_time_seconds" not in line
        ]
        (tmp_path / name).write_text("".join(kept))
    assert (
        main(["calibrate", "--before", str(tmp_path / "a"), "--after", str(tmp_path / "b"), "--partial"]) == 0
    )
    block = capsys.readouterr().out
    prefill = re.search(r"^  prefillTokensPerSecond: (\d+)  # (.*)$", block, re.M)
    assert prefill is not None, block
    assert float(prefill[1]) == pytest.approx(PREFILL, rel=TOLERANCE)
    assert prefill[2].startswith(
        "window 1: no vllm:request_prefill_time_seconds; the mean prompt (vllm:prompt_tokens_total per "
        "vllm:time_to_first_token_seconds_count, 512 tokens) over the mean vllm:time_to_first_token_seconds less "
        "the mean vllm:request_queue_time_seconds (0 s), 0.08 s, at a batch of 4"
    )
    assert "(length not known): 60 requests finished, batch 4, step 0.0225 s" in block
    assert "batch: vllm:num_requests_running over the start and the end" not in block  # one window: no line


# -- bad input: one line, exit code 2 --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Bodies as a user saves them: a busy engine at 40 s and 100 s, an idle one, one restarted (its counters
    lower than before), one made anew (its counters higher, its _created later), two models, not vLLM."""
    d = tmp_path_factory.mktemp("saved")
    files = dict(zip(("busy1", "busy2"), bodies(lambda t: 2.0, (40, 100)), strict=True))
    files |= dict(zip(("idle1", "idle2"), bodies(lambda t: 0.0, (10, 70)), strict=True))
    (files["restarted"],) = bodies(lambda t: 2.0, (20,))
    (files["anew"],) = bodies(lambda t: 6.0, (110,), start=50)
    (files["two"],) = bodies(lambda t: 2.0, (40,), models=("a", "b"))
    files["sglang"] = 'sglang:num_running_reqs{model_name="m"} 3.0\n'
    files["html"] = "<html><body>Not Found</body></html>\n"
    files["empty"] = ""
    files["later"] = f"# gpuscale calibrate: scraped at {T0 + 100:.3f} from x\n" + files["busy2"]
    files["earlier"] = f"# gpuscale calibrate: scraped at {T0 + 40:.3f} from x\n" + files["busy1"]
    for name, text in files.items():
        (d / name).write_text(text)
    (d / "binary").write_bytes(b"vllm:x 1\n\xff\xfe\n")
    return d


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


PORT = _closed_port()
E = "gpuscale: error: "


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            [],
            "calibrate: give --engine URL (and run a load while it measures), or --before FILE --after FILE (two saved /metrics bodies)",
        ),
        (
            ["--before", "{d}/busy1"],
            "calibrate: --before and --after come in pairs (given: 1 --before, 0 --after)",
        ),
        (
            ["--engine", "localhost:8000"],
            '--engine "localhost:8000" must be an http:// or https:// URL, e.g. http://10.0.0.5:8000',
        ),
        (
            ["--engine", f"http://127.0.0.1:{PORT}"],
            f'--engine "http://127.0.0.1:{PORT}/metrics": cannot scrape it: ClientConnectorError: Cannot connect to host '
            f"127.0.0.1:{PORT} ssl:False [Connect call failed ('127.0.0.1', {PORT})]",
        ),
        (["--engine", "http://x", "--seconds", "0"], '--seconds "0" must be greater than 0'),
        (["--engine", "http://x", "--max-num-seqs", "0"], '--max-num-seqs "0" must be a whole number >= 1'),
        (
            ["--engine", "http://x", "--kv-cache-tokens", "1e6"],
            '--kv-cache-tokens "1e6" must be a whole number >= 1',
        ),
        (
            ["--before", "{d}/busy1", "--after", "{d}/busy2", "--save", "s"],
            '--save "s": only with --engine (it keeps the bodies --engine scrapes)',
        ),
        (
            ["--before", "{d}/nothing", "--after", "{d}/busy2"],
            '--before "{d}/nothing": cannot read it: No such file or directory',
        ),
        (
            ["--before", "{d}/binary", "--after", "{d}/busy2"],
            '--before "{d}/binary": cannot read it: not UTF-8 text (byte 0xff at offset 9, line 2)',
        ),
        (
            ["--before", "{d}/html", "--after", "{d}/busy2"],
            '--before "{d}/html": not a metrics exposition: does not parse (invalid metric name:<html><body>Not Found</body></html>)',
        ),
        (
            ["--before", "{d}/busy1", "--after", "{d}/empty"],
            '--after "{d}/empty": empty: not a metrics exposition',
        ),
        (
            ["--before", "{d}/sglang", "--after", "{d}/busy2"],
            '--before "{d}/sglang": no vLLM series (vllm:num_requests_running, vllm:request_success_total, …): '
            "calibrate reads a vLLM engine's /metrics",
        ),
        (
            ["--before", "{d}/two", "--after", "{d}/two"],
            '--before "{d}/two": serves models [a, b]: name one with --model',
        ),
        (
            ["--before", "{d}/busy1", "--after", "{d}/busy2", "--model", "llama"],
            '--model "llama": --before "{d}/busy1" serves no such model (it serves [mock-llm])',
        ),
        (
            ["--before", "{d}/busy2", "--after", "{d}/restarted"],
            '--before "{d}/busy2" --after "{d}/restarted": the engine restarted within the window '
            "(vllm:prompt_tokens_total fell from 102400 to 20480); measure a window without a restart",
        ),
        (
            ["--before", "{d}/busy1", "--after", "{d}/anew"],
            '--before "{d}/busy1" --after "{d}/anew": the engine restarted within the window '
            "(vllm:request_success_created went from 1700000000.000 to 1700000050.000); measure a window without a restart",
        ),
        (
            ["--before", "{d}/idle1", "--after", "{d}/idle2"],
            '--before "{d}/idle1" --after "{d}/idle2": no request in the window (vllm:request_success_total and '
            "vllm:time_to_first_token_seconds_count did not move): run a load while calibrating",
        ),
        (
            ["--before", "{d}/later", "--after", "{d}/earlier"],
            '--before "{d}/later" --after "{d}/earlier": the end was scraped 60 s before the start: swap them',
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    saved: Path, capsys: pytest.CaptureFixture[str], argv: list[str], line: str
) -> None:
    code = main(["calibrate", *(a.format(d=saved) for a in argv)])
    captured = capsys.readouterr()
    assert (code, captured.out, captured.err.splitlines()) == (2, "", [E + line.format(d=saved)])


async def _serve(answers: list[tuple[str, str]]) -> tuple[web.AppRunner, str]:
    async def metrics(request: web.Request) -> web.Response:
        content_type, text = answers.pop(0)
        return web.Response(text=text, headers={"Content-Type": content_type})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = socket.create_server(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    return runner, f"http://127.0.0.1:{sock.getsockname()[1]}/metrics"


TEXT = "text/plain; version=0.0.4; charset=utf-8"


@pytest.mark.parametrize(
    ("answers", "line"),
    [
        (
            [("text/html", "<html></html>")],
            'cannot scrape it: Content-Type "text/html; charset=utf-8" is not a metrics exposition',
        ),
        (
            [(TEXT, 'sglang:num_running_reqs{model_name="m"} 3.0\n')],
            "no vLLM series (vllm:num_requests_running, vllm:request_success_total, …): calibrate reads a vLLM engine's /metrics",
        ),
        (
            [(TEXT, b) for b in (*bodies(lambda t: 2.0, (100,)), *bodies(lambda t: 2.0, (20,)))],
            "the engine restarted within the window (vllm:prompt_tokens_total fell from 102400 to 20480); measure a window without a restart",
        ),
        (
            [(TEXT, b) for b in bodies(lambda t: 0.0, (10, 20))],
            "no request in the window (vllm:request_success_total and vllm:time_to_first_token_seconds_count did not move): run a load while calibrating",
        ),
    ],
    ids=["html", "not-vllm", "restart", "no-request"],
)
async def test_a_bad_engine_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], answers: list[tuple[str, str]], line: str
) -> None:
    runner, url = await _serve(list(answers))
    try:
        code = await asyncio.to_thread(main, ["calibrate", "--engine", url, "--seconds", "0.05"])
    finally:
        await runner.cleanup()
    captured = capsys.readouterr()
    assert (code, captured.out, captured.err.splitlines()) == (2, "", [f'{E}--engine "{url}": {line}'])


# -- the arithmetic, on windows written by hand ----------------------------------------------------------------


def _window(label: str, batch: float, step: float) -> Window:
    """A window in which 10 requests finished and 1,000 tokens took ``step`` each, at ``batch``."""

    def reading(at: float, n: float) -> Reading:
        values = {FINISHED: n, ITL + "_count": 100 * n, ITL + "_sum": 100 * n * step}
        return Reading("x", at, "m", values, batch, None, {})

    return Window(label, label, reading(0.0, 0.0), reading(60.0, 10.0))


@pytest.mark.parametrize(
    ("points", "step", "slope", "said"),
    [
        (
            [(1, 0.010), (5, 0.014), (9, 0.018)],
            0.010,
            0.001,
            "the line through step(1) = 0.01 s in w1, step(5) = 0.014 s in w2, step(9) = 0.018 s in w3 (least squares)",
        ),
        (
            [(4, 0.013), (8, 0.017)],
            0.010,
            0.001,
            "the line through step(4) = 0.013 s in w1, step(8) = 0.017 s in w2, at a batch of 1",
        ),
        (
            [(1, 0.0042), (3.6, 0.0038)],
            0.0042,
            0.0,
            "step(1) = 0.0042 s in w1, step(3.6) = 0.0038 s in w2: the step did not grow with the batch (it fell by 10%), so a slope of 0",
        ),
        (
            [(1, 0.010), (4, 0.005)],
            0.010,
            "the step fell by 67% as the batch grew (step(1) = 0.01 s in w1, step(4) = 0.005 s in w2): measure steadier windows",
            None,
        ),
        ([(8, 0.02), (8.5, 0.021)], "one concurrency measured", "one concurrency measured", None),
        (
            [(1.2, 0.01)],
            0.01,
            "one concurrency measured (step(1.2) = 0.01 s in w1): the slope needs a window at another concurrency",
            None,
        ),
    ],
    ids=["three", "two", "flat", "falling", "too-close", "one-at-1"],
)
def test_the_decode_figures_from_the_windows_points(
    points: list[tuple[float, float]], step: float | str, slope: float | str | None, said: str | None
) -> None:
    windows = [_window(f"w{i}", b, s) for i, (b, s) in enumerate(points, 1)]
    cal = calibrate_windows(windows, Given(4, 1000))
    for key, expected in (("decodeStepSeconds", step), ("decodeStepSecondsPerSequence", slope)):
        if isinstance(expected, str):
            assert cal.missing[key].startswith(expected), cal.missing[key]
        elif expected is not None:
            assert cal.figures[key].value == pytest.approx(expected, rel=1e-9, abs=1e-12)
    if said is not None:
        assert said in " | ".join(f.source for f in cal.figures.values())
