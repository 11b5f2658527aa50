"""A block ``gpuscale calibrate`` writes, loaded back as the simulator loads a scenario's ``workload.tokens``
(with a one-request log beside it): what the calibration tests hold the block to."""

from __future__ import annotations

import io
import textwrap

from gpuscale.sim import parse_scenario
from gpuscale.sim.tokens import TokenParams

LOG = "seconds,prompt_tokens,output_tokens\n0,512,128\n"


def load_block(block: str) -> TokenParams:
    """``block`` under a scenario's ``workload``, through the simulator's parser."""
    text = f"""
name: calibrated
durationSeconds: 10
workload:
  replicaModel: tokens
{textwrap.indent(block, "  ")}demand: {{shape: requests, file: log.csv}}
policies:
  - name: o
    oracle: {{maxReplicas: 4}}
"""
    tokens = parse_scenario(text, open_lines=lambda name: io.StringIO(LOG)).workload.tokens
    assert tokens is not None
    return tokens
