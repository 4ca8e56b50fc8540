"""Reference oracles the tests compare ptdebug against (Debian's libipt 2.0.5).

Layer: tests only. Nothing under `pt_decoder` or `adapter` may import this package;
it exists so that differential tests of every decoder layer share one binding.
"""
