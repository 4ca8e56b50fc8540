"""The command-line front ends of `ptdebug`, one module a command (record, import_perf, watch,
doctor, dap, export, latency): argument parsing, what is printed and the exit status.

Layer: the top of adapter. A front end may import any package of ptdebug; no package imports
a front end (adapter/cli.py, the one dispatcher, finds them by name). The work itself lives in
the packages below (capture, hw, export, protocol, ...), so tests and other front ends call it
without going through a command line.
"""
