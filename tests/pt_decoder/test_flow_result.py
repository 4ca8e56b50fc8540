"""FlowResult's own queries (pt_decoder/flow_result.py), on hand-made flows."""
from __future__ import annotations

from array import array

from pt_decoder.flow_result import FlowResult


def _flow(ips, items) -> FlowResult:
    n = len(ips)
    return FlowResult(array("Q", ips), array("Q", [0] * n), array("Q", [0] * n),
                      array("B", [0] * n), items)


def test_ptwrite_events_are_placed_on_the_instruction_at_their_ip():
    items = [("event", 1, 0, None, 0, {"type": "ptwrite", "ip": 0x10, "payload": 9}),
             ("event", 3, 0, None, 0, {"type": "tick", "ip": 0x30}),
             ("event", 4, 0, None, 0, {"type": "ptwrite", "ip": None, "payload": 2}),
             ("error", 5, 0, 0x50, -7, None)]
    flow = _flow([0x10, 0x20, 0x30, 0x40, 0x50], items)
    assert flow.ptwrites() == [(0, 9), (4, 2)]


def test_a_ptwrite_whose_ip_is_not_the_previous_instruction_stays_where_it_was_reported():
    items = [("event", 2, 0, None, 0, {"type": "ptwrite", "ip": 0x99, "payload": 5}),
             ("event", 0, 0, None, 0, {"type": "ptwrite", "ip": 0x10, "payload": 6})]
    assert _flow([0x10, 0x20, 0x30], items).ptwrites() == [(2, 5), (0, 6)]
