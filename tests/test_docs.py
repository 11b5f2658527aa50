"""The user docs held to what they document: no internal references; the figures and versions they quote
are the ones the code, the pins and the measured tables have; the symptoms they name are the ones KEDA and
the CLI print."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

import pytest
import yaml

from gpuscale import __version__
from gpuscale.controlplane.build import go_modules_dir, versions

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
CHANGELOG = ROOT / "CHANGELOG.md"
PUBLIC = [README, CHANGELOG, *sorted(DOCS.glob("*.md"))]

# References to this project's own tracker or work in progress: a public reader cannot follow them. Another
# project's issue, owner/repo#N, is a public reference and stays.
INTERNAL = [
    re.compile(r"\b(issues?|PRs?|pull requests?|tickets?|sessions?)[ -]?#?\d+\b", re.I),
    re.compile(r"\b(this|the|that) (issue|session)\b", re.I),
    re.compile(r"\bbefore/after\b", re.I),
]


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_no_internal_references_in_the_public_docs() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {match[0]!r}"
        for path in PUBLIC
        for number, line in enumerate(_text(path).splitlines(), 1)
        for pattern in INTERNAL
        for match in [pattern.search(line)]
        if match
    ]
    assert found == []


def test_the_scanner_finds_what_it_is_for() -> None:
    for line in ["the figures issue 20 quotes", "Issue 20's goals", "the issue-20 goals", "as this session"]:
        assert any(p.search(line) for p in INTERNAL), line
    for line in ["kedacore/keda#8056", "vllm-project/vllm#31503 and #55634", "a keep-alive session"]:
        assert not any(p.search(line) for p in INTERNAL), line


def test_a_wrong_scaler_address_is_named_by_what_keda_shows() -> None:
    """KEDA 2.21 puts "no metric specs returned from scalers" on the ScaledObject when GetMetricSpec fails;
    the gRPC error is only in its operator's log. Where KEDA's source at the pinned version is at hand (the
    Go module cache the control-plane build fills), the message is held to it."""
    text = " ".join(_text(DOCS / "troubleshooting.md").split())  # lines joined: the docs wrap at 110
    symptom = "no metric specs returned from scalers for ScaledObject"
    assert symptom in text and "scalerAddress" in text.split(symptom, 1)[1][:1000]
    assert "keda-operator" in text.split(symptom, 1)[1][:1000]
    keda = versions(go_modules_dir())["keda"]
    cache = Path(os.environ.get("GOMODCACHE") or Path.home() / "go" / "pkg" / "mod")
    source = cache / f"github.com/kedacore/keda/v2@{keda}/controllers/keda/hpa.go"
    if source.is_file():
        assert f'"{symptom} %s/%s"' in _text(source)


def test_install_says_how_to_get_the_helm_the_tests_use() -> None:
    from helm_python import _native

    helm = _native.helm_sdk_version()  # what tests/deploy renders and dry-runs the chart with
    requirements = _text(DOCS / "install.md").split("## Requirements", 1)[1].split("\n## ", 1)[0]
    requirements = " ".join(requirements.split())
    assert f"https://get.helm.sh/helm-{helm}-linux-amd64.tar.gz" in requirements
    assert f"Helm {helm.lstrip('v')}'s Go SDK" in requirements


def test_the_compatibility_table_has_the_pinned_and_tested_versions() -> None:
    text = _text(DOCS / "compatibility.md")
    pins = versions(go_modules_dir())
    for component, version in pins.items():
        assert version in text, component
    from tests.deploy.helpers import KUBE_VERSION

    assert f"Kubernetes {KUBE_VERSION}'s schemas" in text
    vendored = re.search(r"KEDA \*\*(v[\d.]+)\*\*", _text(ROOT / "tests" / "schemas" / "keda" / "README.md"))
    assert vendored is not None and f"{vendored[1]}'s `ScaledObject`" in text
    assert "(docs/compatibility.md)" in _text(README)


def _version_fields() -> dict[str, str]:
    chart = yaml.safe_load(_text(ROOT / "deploy" / "helm" / "gpuscale" / "Chart.yaml"))
    project = tomllib.loads(_text(ROOT / "pyproject.toml"))["project"]
    return {
        "pyproject": project["version"],
        "gpuscale.__version__": __version__,
        "chart appVersion": str(chart["appVersion"]),
        "chart version": str(chart["version"]),
    }


def test_the_changelog_starts_at_the_version_the_app_and_the_chart_have() -> None:
    text = _text(CHANGELOG)
    releases = re.findall(r"^## (\d+\.\d+\.\d+)\b", text, re.M)
    assert releases, "CHANGELOG.md has no release section"
    assert set(_version_fields().values()) == {releases[0]}, _version_fields()
    assert "## Version policy" in text and "## Upgrading" in text and "### Upgrade notes" in text
    assert "(CHANGELOG.md)" in _text(README)


def _decisions_rows() -> dict[tuple[str, str], tuple[str, str, str]]:
    """docs/decisions.md's table (held to the simulator by tests/sim/test_decisions_doc.py): (trace, policy)
    → (unserved %, GPU-hours, direction changes)."""
    block = _text(DOCS / "decisions.md").split("<!-- table:begin", 1)[1].split("<!-- table:end", 1)[0]
    rows, trace = {}, ""
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 7 or not re.fullmatch(r"[\d.]+", cells[2]):
            continue
        trace = cells[0].strip("`") or trace
        rows[(trace, cells[1])] = (cells[2], cells[5], cells[6])
    return rows


def test_which_signal_to_deploy_quotes_the_decisions_table() -> None:
    """One answer in docs/profiles.md, its figures those of the measured table; README and docs/engines.md
    point to it and say the same."""
    profiles = _text(DOCS / "profiles.md")
    heading = "## Which signal to deploy for LLM serving"
    section = profiles.split(heading, 1)[1].split("\n## ", 1)[0]
    assert section.lstrip().startswith("**Deploy `llm-serving`**")
    table = _decisions_rows()
    quoted = re.findall(
        r"^\| `([a-z-]+)` \| ([\d.]+) %, ([\d.]+), (\d+) \| ([\d.]+) %, ([\d.]+), (\d+) \|$", section, re.M
    )
    assert {q[0] for q in quoted} == {t for t, _ in table}
    for trace, *figures in quoted:
        assert tuple(figures[:3]) == table[(trace, "gpuscale-llm-serving")], trace
        assert tuple(figures[3:]) == table[(trace, "gpuscale-engine")], trace
    anchor = "profiles.md#which-signal-to-deploy-for-llm-serving"
    readme = _text(README)
    assert f"docs/{anchor}" in readme and "deploy the `llm-serving`" in readme
    engines = _text(DOCS / "engines.md")
    assert anchor in engines and "measures best" not in engines


def test_query_explain_is_named_where_a_user_asks_why() -> None:
    assert "--explain" in _text(README)
    troubleshooting = _text(DOCS / "troubleshooting.md")
    assert "**Why did it scale (or not)?** `gpuscale query --explain`" in troubleshooting


@pytest.mark.parametrize(
    ("controller", "named"),
    [
        ("deployment-controller", "deployment"),
        ("replicaset-controller", "replicaset"),
        ("daemonset-controller", "daemonset"),
        ("horizontal-pod-autoscaler-controller", "HPA"),
        ("garbage-collector-controller", "garbage collector"),
        ("namespace-controller", "namespace"),
        ("serviceaccount-controller", "service-account"),
        ("node-lifecycle-controller", "node-lifecycle"),
    ],
)
def test_the_testing_doc_lists_the_controllers_the_control_plane_runs(controller: str, named: str) -> None:
    from gpuscale.controlplane.launcher import CONTROLLERS

    assert controller in CONTROLLERS
    line = next(x for x in _text(DOCS / "testing.md").splitlines() if "kube-controller-manager (" in x)
    listed = line.split("kube-controller-manager (", 1)[1].split(" controllers", 1)[0]
    assert named in [x.strip() for x in listed.split(",")]
