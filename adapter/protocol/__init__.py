"""The Debug Adapter Protocol plumbing: framing, messages, channel, error ids, typed arguments.

Layer: protocol, the bottom of the adapter. Never imports hw, capture, backends or features;
everything above it speaks DAP through `Channel` and raises `errors.AdapterError`.
"""
