"""One engine process: its launch (argv, env, source tree), its port, and its start/ready/stop."""

from evalkit.engine.launch import PORT_PLACEHOLDER, CellLaunch, build_launch, describe_source
from evalkit.engine.ports import PortBook, free_port
from evalkit.engine.process import EngineProcess, ReadyTimings

__all__ = ["PORT_PLACEHOLDER", "CellLaunch", "EngineProcess", "PortBook", "ReadyTimings", "build_launch",
           "describe_source", "free_port"]
