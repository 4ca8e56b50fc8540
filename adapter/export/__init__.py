"""Offline views of a recording: pprof and Perfetto exports, latency between code points.

Layer: adapter.export, a consumer of adapter.recording (`Recording`: the bundle decoded once,
with its Python frames and goroutine index) and of pt_decoder; it decodes nothing itself and
knows nothing of DAP sessions.
"""
