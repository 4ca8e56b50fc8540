"""The recording layer: a trace bundle decoded once (`recording.Recording`), with everything its
views need built from that one decode when first asked for: function names and source lines,
cycles per instruction, the Python frames of a Python recording and the goroutine index of a
Go one (`goroutines`).

Layer: adapter.recording, above adapter.capture (bundles: adapter/capture/bundle.py over
pt_decoder/bundle_reader.py), adapter.golang and adapter.python (the language knowledge), and
pt_decoder (decoding). Its consumers: live captures and replayed bundles (adapter.features,
adapter.backends), the exports and `ptdebug latency` (adapter.export), the hot-lines language
server (adapter.lsp). It knows nothing of DAP sessions.
"""
