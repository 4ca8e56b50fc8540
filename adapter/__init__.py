"""ptdebug's DAP adapter and everything that touches live processes.

Layer: top. May import pt_decoder; pt_decoder never imports this package.
"""
