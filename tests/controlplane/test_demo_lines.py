"""What ``gpuscale demo --control-plane real`` prints of the HPA, from the HPA objects the API serves (pure,
no control plane): its metric as a number, not a Kubernetes quantity, and no zeros before its first sync."""

from __future__ import annotations

from typing import Any

import pytest

from gpuscale.controlplane.demo import format_number, hpa_reading, hpa_words, parse_quantity


def synced_hpa(average_value: str, desired: int) -> dict[str, Any]:
    return {
        "status": {
            "currentReplicas": 1,
            "desiredReplicas": desired,
            "currentMetrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {"name": "s0-gpuscale"},
                        "current": {"averageValue": average_value},
                    },
                }
            ],
            "conditions": [{"type": "AbleToScale", "status": "True"}],
        }
    }


@pytest.mark.parametrize(
    ("quantity", "number", "shown"),
    [
        ("41667m", 41.667, "41.7"),
        ("40", 40.0, "40"),
        ("40500m", 40.5, "40.5"),
        ("50m", 0.05, "0.05"),
        ("2k", 2000.0, "2000"),
        ("1Ki", 1024.0, "1024"),
        ("1.5", 1.5, "1.5"),
    ],
)
def test_a_kubernetes_quantity_is_shown_as_its_number(quantity: str, number: float, shown: str) -> None:
    assert parse_quantity(quantity) == pytest.approx(number)
    assert format_number(parse_quantity(quantity)) == shown


def test_a_value_that_is_no_quantity_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r'^"forty" is not a Kubernetes quantity$'):
        parse_quantity("forty")


def test_the_line_says_the_hpa_metric_as_a_number_beside_its_desired_replicas() -> None:
    words = hpa_words(hpa_reading(synced_hpa("41667m", 5)))
    assert words.split() == ["hpa", "metric", "41.7", "desired", "5"]


@pytest.mark.parametrize(
    ("hpa", "said"),
    [
        (None, "hpa not created yet"),  # KEDA has not made it
        ({"status": {"currentReplicas": 0, "desiredReplicas": 0}}, "hpa not synced yet"),  # as KEDA makes it
        ({"status": {}}, "hpa not synced yet"),
        ({}, "hpa not synced yet"),
    ],
)
def test_before_the_hpas_first_sync_the_line_says_so_not_desired_0(
    hpa: dict[str, Any] | None, said: str
) -> None:
    reading = hpa_reading(hpa)
    assert hpa_words(reading).strip() == said
    assert reading.desired is None and reading.metric is None  # the timeline's cells stay empty
    # the same width as a synced line: the columns after it stay put
    assert len(hpa_words(reading)) == len(hpa_words(hpa_reading(synced_hpa("41667m", 5))))
