"""The node agent: collect (sample GPUs) → transform (attribute to pods) → export (/metrics, Watch).

Everything served comes from memory (``NodeState``); only the sampling loop talks to the driver.
"""

from .settings import AgentSettings

__all__ = ["AgentSettings"]
