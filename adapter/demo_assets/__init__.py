"""Programs `ptdebug demo` runs (adapter/demo.py): a small Python inference service and the C
source of its native helper, compiled at demo time. Data files of the package; nothing to import.
"""
