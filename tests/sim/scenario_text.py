"""Scenario files as the simulator tests write them: ``head`` (name, duration, workload, demand) followed by
``policy`` entries, each a ScaledObject from one template with only what a test varies given.

The result is YAML text laid out as a user writes it, one key a line (``        triggers: [...]``, ``kind:
ScaledObject``, ``name: p``), so that a test may still ``.replace`` a key or a placeholder in it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

__all__ = ["GPUSCALE", "external", "head", "policy"]

# the pipeline of a policy on a gpuscale trigger: the agents sample every second
GPUSCALE = "{gpuscale: {samplingIntervalSeconds: 1}}"


def head(
    *,
    name: str = "s",
    duration: int | str = 60,
    workload: str = "{capacityPerReplica: 10}",
    demand: str = "{shape: constant, value: 5}",
) -> str:
    """A scenario up to ``policies:``; ``workload`` and ``demand`` are YAML flow mappings."""
    return f"""
name: {name}
durationSeconds: {duration}
workload: {workload}
demand: {demand}
policies:
"""


def external(metadata: str, kind: str = "external") -> str:
    """A ``triggers`` list of one gpuscale trigger (``external`` or ``external-push``) with ``metadata``, a YAML
    flow mapping."""
    return f"[{{type: {kind}, metadata: {metadata}}}]"


def policy(
    triggers: str,
    *,
    name: str = "p",
    target: str = "x",
    pipeline: str | None = None,
    keys: Sequence[str] = (),
    spec: Sequence[str] = (),
    metadata: str | None = None,
) -> str:
    """One entry of ``policies``: a ScaledObject scaling ``target``.

    ``triggers``: a flow list (one line, see ``external``) or a block list (lines of ``- type: ...``);
    ``pipeline``: the policy's pipeline, a flow mapping or a block (lines); ``keys``: the policy's other keys
    (``hpaSyncOffsetSeconds: 4``, ``faults: [...]``); ``spec``: the ScaledObject's other spec keys, each one
    line or a block of lines, between ``scaleTargetRef`` and ``triggers``; ``metadata``: the ScaledObject's,
    a flow mapping."""
    lines = [f"  - name: {name}", *(f"    {key}" for key in keys)]
    if pipeline is not None:
        lines.append(_key("pipeline", pipeline, 4))
    lines += ["    scaledObject:", "      apiVersion: keda.sh/v1alpha1", "      kind: ScaledObject"]
    if metadata is not None:
        lines.append(f"      metadata: {metadata}")
    lines += ["      spec:", f"        scaleTargetRef: {{name: {target}}}"]
    lines += [_indent(item, 8) for item in spec]
    lines.append(_key("triggers", triggers, 8))
    return "\n".join(lines) + "\n"


def _key(key: str, value: str, indent: int) -> str:
    """``key: value`` at ``indent``: a one-line value (a flow mapping or list) after the key, lines as a block
    below it, two spaces further in."""
    text = textwrap.dedent(value).strip()
    if "\n" not in text:
        return " " * indent + f"{key}: {text}"
    return " " * indent + f"{key}:\n" + _indent(text, indent + 2)


def _indent(text: str, indent: int) -> str:
    """``text`` (a line or a block, its common indentation removed) at ``indent``."""
    return "\n".join(" " * indent + line for line in textwrap.dedent(text).strip("\n").splitlines())
