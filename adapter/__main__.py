"""`python -m adapter ARGS` is `ptdebug ARGS`; it is also how ptdebug starts its own Python
child processes without depending on the current directory.

Layer: top-level entry point (dispatch only). ptdebug starts its children as
`python -I <this package's directory> ARGS` (adapter/spawn.py): `-I` keeps the current
directory, PYTHONPATH and the user's site-packages off `sys.path`, so a workspace with its own
`adapter/` package or a `bisect.py` can neither replace ptdebug's code nor run inside it.
Started by path, Python puts this package's own directory first on `sys.path`; it is replaced
here by the directory that holds the package (site-packages, or a source checkout), which is
where ptdebug was imported from in the parent.

    python -I .../adapter COMMAND ARGS        the `ptdebug` command line
    python -I .../adapter -m MODULE ARGS      run one of ptdebug's modules as `python -m` would
"""
import os
import sys

if not __package__:  # started by path (`python -I .../adapter`), not as `python -m adapter`
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if len(sys.argv) > 2 and sys.argv[1] == "-m":
    import runpy

    module = sys.argv[2]
    del sys.argv[1:3]
    sys.argv[0] = module
    runpy.run_module(module, run_name="__main__", alter_sys=True)
else:
    from adapter.cli import main

    sys.exit(main(sys.argv[1:]))
