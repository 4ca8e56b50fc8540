"""Offline views of a trace bundle: pprof and Perfetto exports, latency between code points.

Layer: adapter.export, a consumer of bundles (adapter.capture.bundle) and of pt_decoder; it
knows nothing of DAP sessions. `trace.DecodedBundle` is the one place bundles are decoded here.
"""
