"""The agent the deploy tests scrape: five mock GPUs, four of them attributed to pods through the stand-in
kubelet.

GPU utilization per mock GPU: llm's two pods hold GPUs 0, 1 and 2 (pod b has two), embed holds GPU 3, GPU 4 is
free. A StatefulSet "llm-embed" would not match the Deployment regex.
"""

from __future__ import annotations

from gpuscale.agent.service import Agent
from tests.conftest import AgentFactory
from tests.fakes.kubelet import FakeKubelet, pod_resources
from tests.poll import until

PATTERNS = "constant:30,constant:50,constant:70,constant:90,constant:10"
POD_A, POD_B = "llm-7d9f8b6c5-x2x4z", "llm-7d9f8b6c5-q8w7n"


async def attributed_agent(start_agent: AgentFactory, kubelet: FakeKubelet) -> Agent:
    """An agent on ``PATTERNS`` whose GPUs 0-3 are held by ``POD_A``, ``POD_B`` and ``llm-embed-0``."""
    agent: Agent = await start_agent(PATTERNS, gpus=5)
    u = [d.uuid for d in agent.state.devices]
    kubelet.pods = [
        pod_resources("ai", POD_A, {"server": [("nvidia.com/gpu", [u[0]])]}),
        pod_resources("ai", POD_B, {"server": [("nvidia.com/gpu", [u[1], u[2]])]}),
        pod_resources("ai", "llm-embed-0", {"main": [("nvidia.com/gpu", [u[3]])]}),
    ]
    await until(lambda: len(agent.state.assignments), what="four GPUs attributed", ok=lambda n: n >= 4)
    return agent
