"""`lakegate serve` with its event loop's lag recorded: how long a callback that is due waits.

A 1 ms ticker on the gateway's loop measures how late each tick runs; every ``SIGUSR1`` appends
one JSON line to the file ``LOOPLAG_OUT`` names (ticks, p50/p99/max lag in ms since the last
signal, and the garbage collector's pauses per generation) and starts over, so a benchmark can read the lag of each of its phases. A late tick is
time the loop spent elsewhere: a hit that arrived then waited as long.

    LOOPLAG_OUT=lag.jsonl python -m benchmarks.looplag serve --listen ... (the lakegate CLI's arguments)

``LOOPLAG_SWITCH_INTERVAL`` (seconds) sets the interpreter's switch interval first: how long
the loop's thread may wait for the GIL while a worker thread runs Python code.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import sys
import time
from typing import Any

TICK = 0.001


class LoopLag:
    def __init__(self, out: str) -> None:
        self.out = out
        self.lags: list[float] = []
        self.gc_started = 0.0
        self.gc_pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}  # by generation

    def gc_event(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.gc_started = time.perf_counter()
        else:
            self.gc_pauses[info["generation"]].append(time.perf_counter() - self.gc_started)

    async def tick(self) -> None:
        while True:
            due = time.perf_counter() + TICK
            await asyncio.sleep(TICK)
            self.lags.append(max(0.0, time.perf_counter() - due))

    def report(self) -> None:
        lags, self.lags = sorted(self.lags), []
        pauses, self.gc_pauses = self.gc_pauses, {0: [], 1: [], 2: []}
        if not lags:
            return
        line: dict[str, Any] = {
            "ticks": len(lags), "p50_ms": round(lags[len(lags) // 2] * 1e3, 3),
            "p99_ms": round(lags[int(len(lags) * 0.99)] * 1e3, 3), "max_ms": round(lags[-1] * 1e3, 3),
            "over_5ms": sum(lag > 0.005 for lag in lags),
            "gc": {str(gen): {"n": len(p), "max_ms": round(max(p, default=0) * 1e3, 3)} for gen, p in pauses.items()}}
        with open(self.out, "a") as f:
            f.write(json.dumps(line) + "\n")


def main() -> int:
    import uvloop

    lag = LoopLag(os.environ["LOOPLAG_OUT"])
    gc.callbacks.append(lag.gc_event)
    if os.environ.get("LOOPLAG_SWITCH_INTERVAL"):
        sys.setswitchinterval(float(os.environ["LOOPLAG_SWITCH_INTERVAL"]))
    new_event_loop = uvloop.new_event_loop

    def instrumented() -> Any:
        loop = new_event_loop()
        loop.call_soon(lambda: loop.create_task(lag.tick()))
        loop.add_signal_handler(signal.SIGUSR1, lag.report)
        return loop

    uvloop.new_event_loop = instrumented
    from gateway.cli import main as lakegate

    sys.argv = ["lakegate", *sys.argv[1:]]
    lakegate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
