"""ptdebug's Intel Processor Trace library: packets, events, instruction flow, timing.

Layer: bottom. Never imports `adapter`. Layers, lowest first (docs/decoding.md):
packet (packet.pyx) -> event (event.pyx) -> insn (insn.pyx, over image.py)
-> timing (timing.pyx) -> history (history.py) -> lines (lines.py).
"""
