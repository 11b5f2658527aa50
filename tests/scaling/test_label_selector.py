"""Label selectors: parsing, canonical form, matching, and the exact error messages."""

from __future__ import annotations

import pytest

from gpuscale.scaling import LabelSelector, Requirement, SelectorError, parse_selector


@pytest.mark.parametrize(
    ("text", "requirements"),
    [
        ("", ()),
        ("   ", ()),
        ("app=llm", (Requirement("app", "=", ("llm",)),)),
        ("app==llm", (Requirement("app", "=", ("llm",)),)),
        ("app = llm", (Requirement("app", "=", ("llm",)),)),
        ("app!=llm", (Requirement("app", "!=", ("llm",)),)),
        ("app=", (Requirement("app", "=", ("",)),)),
        ("tier in (b, a,a)", (Requirement("tier", "in", ("a", "b")),)),
        ("tier notin (a)", (Requirement("tier", "notin", ("a",)),)),
        ("gpu", (Requirement("gpu", "exists"),)),
        ("!spot", (Requirement("spot", "!exists"),)),
        ("! spot", (Requirement("spot", "!exists"),)),
        (
            "nvidia.com/gpu.product=NVIDIA-H200",
            (Requirement("nvidia.com/gpu.product", "=", ("NVIDIA-H200",)),),
        ),
        (
            "app=llm,tier in (a,b), !canary",
            (
                Requirement("app", "=", ("llm",)),
                Requirement("tier", "in", ("a", "b")),
                Requirement("canary", "!exists"),
            ),
        ),
    ],
)
def test_parse(text: str, requirements: tuple[Requirement, ...]) -> None:
    selector = parse_selector(text)
    assert selector == LabelSelector(requirements)
    assert parse_selector(str(selector)) == selector


@pytest.mark.parametrize(
    ("text", "labels", "expected"),
    [
        ("", {}, True),
        ("app=llm", {"app": "llm"}, True),
        ("app=llm", {"app": "web"}, False),
        ("app=llm", {}, False),
        ("app!=llm", {}, True),  # as in Kubernetes: != matches objects without the key
        ("app!=llm", {"app": "llm"}, False),
        ("tier in (a,b)", {"tier": "b"}, True),
        ("tier in (a,b)", {"tier": "c"}, False),
        ("tier in (a,b)", {}, False),
        ("tier notin (a,b)", {}, True),
        ("tier notin (a,b)", {"tier": "a"}, False),
        ("gpu", {"gpu": ""}, True),
        ("gpu", {}, False),
        ("!spot", {"spot": "true"}, False),
        ("!spot", {"x": "y"}, True),
        ("app=llm,tier in (a,b),!canary", {"app": "llm", "tier": "a"}, True),
        ("app=llm,tier in (a,b),!canary", {"app": "llm", "tier": "a", "canary": "1"}, False),
    ],
)
def test_matches(text: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_selector(text).matches(labels) is expected


RULE = "at most 63 characters of [A-Za-z0-9_.-], starting and ending with a letter or digit"
NAME_RULE = f"must be {RULE}"


@pytest.mark.parametrize(
    ("text", "problems"),
    [
        ("a in ()", ('requirement "a in ()": "in" needs at least one value',)),
        ("a,,b", ("empty requirement (two commas in a row, or a leading or trailing comma)",)),
        ("a in (b", ('unclosed "("',)),
        ("a)", ('unmatched ")" at position 1',)),
        (
            "a<3",
            (
                'requirement "a<3" must have one of the forms key, !key, key=value, key!=value, '
                "key in (v1,v2) or key notin (v1,v2)",
            ),
        ),
        ("-a=b", (f'requirement "-a=b": key "-a" {NAME_RULE}',)),
        (
            "a=b c",
            (
                'requirement "a=b c" must have one of the forms key, !key, key=value, key!=value, '
                "key in (v1,v2) or key notin (v1,v2)",
            ),
        ),
        (
            "Example.com/a=b",
            (
                'requirement "Example.com/a=b": key prefix "Example.com" must be a DNS subdomain '
                "(lowercase alphanumerics, '-' and '.', at most 253 characters)",
            ),
        ),
        (
            "a=b_,c in (x, -y)",
            (
                f'requirement "a=b_": value "b_" must be empty or {RULE}',
                f'requirement "c in (x, -y)": value "-y" must be empty or {RULE}',
            ),
        ),
        ("k=" + "v" * 64, (f'requirement "k={"v" * 64}": value "{"v" * 64}" must be empty or {RULE}',)),
    ],
)
def test_errors_name_every_bad_part(text: str, problems: tuple[str, ...]) -> None:
    with pytest.raises(SelectorError) as info:
        parse_selector(text)
    assert info.value.problems == problems
    assert str(info.value) == f'invalid label selector "{text}": ' + "; ".join(problems)
