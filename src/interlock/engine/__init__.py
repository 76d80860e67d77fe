"""The run step: observations in, events and effects out (`RunMachine.step`).

This package imports only `interlock.core` and the standard library: the runtime builds the
inputs, commits the events and applies the effects; the simulator and the engine-level tests
drive the same step without any I/O.
"""

from interlock.engine import effects, inputs
from interlock.engine.effects import Effect, EffectKind
from interlock.engine.inputs import Handles, Input
from interlock.engine.machine import Recorded, RunMachine, Step

__all__ = [
    "Effect",
    "EffectKind",
    "Handles",
    "Input",
    "Recorded",
    "RunMachine",
    "Step",
    "effects",
    "inputs",
]
