"""The simulator: workloads expanded as their controllers would, a kube-scheduler stand-in driving
the real extender service over loopback HTTP, and the report (`gang-extender simulate`)."""

from extender.sim.command import run_simulation
from extender.sim.driver import DriverOptions, SimulationResult, simulate

__all__ = ["DriverOptions", "SimulationResult", "run_simulation", "simulate"]
