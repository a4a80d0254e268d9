"""Old import path of the agent's client: see dataplane.agent.client."""
from dataplane.agent.client import counters, request  # noqa: F401
