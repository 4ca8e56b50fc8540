"""ptdebug's DAP adapter and everything that touches live processes.

Layer: top. May import pt_decoder; pt_decoder never imports this package.
"""

__version__ = "0.1.0"
"""The release; pyproject.toml reads it from here (`ptdebug --version` prints it)."""
