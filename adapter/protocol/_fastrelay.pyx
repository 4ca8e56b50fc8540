# cython: language_level=3
"""Python's handle on the fast relay's C core (fastrelay_core.c): the locks and writers the
Channels share with the C pumps, the plain set, and the bookkeeping of requests in flight.

Layer: protocol (binding). adapter/protocol/relay.py is its only user; nothing here knows DAP
beyond what the C core's header says. Every call that may block (a lock, a write) lets go of
the interpreter's lock first.
"""
from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memcpy, strlen


cdef extern from "fastrelay_core.h" nogil:
    enum:
        FR_MAX_NAME
        FR_MAX_ARGS
        FR_MAX_COMMANDS
        FR_STAT_COUNT
        FR_SEQ_BASE_C "FR_SEQ_BASE"
    ctypedef struct fr_arg_spec:
        char name[48]
        int len
        int mask
        int required
        int complex_
    ctypedef struct fr_command_spec:
        char name[48]
        int len
        int nargs
        fr_arg_spec args[24]
    ctypedef struct fr_plain_set:
        int n
        fr_command_spec commands[64]
    ctypedef struct fr_relay:
        pass
    fr_relay *fr_new(int client_out_fd)
    void fr_set_cpu(fr_relay *r, int cpu)
    void fr_release(fr_relay *r)
    void fr_client_lock(fr_relay *r)
    void fr_client_unlock(fr_relay *r)
    int64_t fr_client_next_seq(fr_relay *r)
    int fr_client_write_locked(fr_relay *r, const char *body, size_t len)
    int fr_start_client(fr_relay *r, int client_in_fd, int python_fd, const char *leftover,
                        size_t leftover_len)
    int fr_attach_backend(fr_relay *r, int backend_fd, int python_fd)
    void fr_detach_backend(fr_relay *r, int generation)
    void fr_backend_lock(fr_relay *r)
    void fr_backend_unlock(fr_relay *r)
    int fr_backend_write_locked(fr_relay *r, const char *body, size_t len)
    void fr_set_plain(fr_relay *r, const fr_plain_set *plain)
    void fr_mark_done(fr_relay *r, int backend_stream)
    int fr_claim(fr_relay *r, int generation, int64_t fast_seq, int64_t *client_seq,
                 char *command)
    int fr_take_inflight(fr_relay *r, int generation, int64_t *client_seq, char *command)
    void fr_stats(fr_relay *r, uint64_t *out)
    int fr_check_request(fr_relay *r, const char *body, size_t len)

import os

SEQ_BASE = FR_SEQ_BASE_C
"""The first seq of the requests the relay sends to the backend itself."""
MAX_NAME = FR_MAX_NAME - 1
MAX_ARGS = FR_MAX_ARGS
MAX_COMMANDS = FR_MAX_COMMANDS
# JSON kinds an argument may have (fastrelay_core.h FR_T_*)
KINDS = {"object": 1, "array": 2, "string": 4, "integer": 8, "number": 16, "boolean": 32,
         "null": 64}
ANY_KIND = 127
STAT_NAMES = ("fast_requests", "fast_responses", "client_to_python", "backend_to_python",
              "deferred_responses")


cdef class _Lock:
    """A context manager over one of the core's mutexes (taken without the GIL held)."""
    cdef fr_relay *relay
    cdef bint backend

    def __enter__(self):
        with nogil:
            if self.backend:
                fr_backend_lock(self.relay)
            else:
                fr_client_lock(self.relay)

    def __exit__(self, *exc):
        if self.backend:
            fr_backend_unlock(self.relay)
        else:
            fr_client_unlock(self.relay)
        return False


cdef class Core:
    """One relay: the client's writer from the start, its reader and the backend's once
    started. Threads the core started keep it alive after this object is gone."""
    cdef fr_relay *relay
    cdef readonly _Lock client_lock
    """Held around every write to the client (Channel uses it as its writer's lock)."""
    cdef readonly _Lock backend_lock
    """Held around every write to the backend."""

    def __cinit__(self, int client_out_fd):
        self.relay = fr_new(client_out_fd)
        if self.relay == NULL:
            raise OSError("cannot set up the fast relay")
        self.client_lock = _Lock.__new__(_Lock)
        self.client_lock.relay = self.relay
        self.client_lock.backend = False
        self.backend_lock = _Lock.__new__(_Lock)
        self.backend_lock.relay = self.relay
        self.backend_lock.backend = True

    def __dealloc__(self):
        if self.relay != NULL:
            fr_release(self.relay)

    def set_cpu(self, int cpu):
        """Run the relay thread on `cpu` (see relay.FastRelay.colocate)."""
        fr_set_cpu(self.relay, cpu)

    def next_client_seq(self):
        """The client stream's next seq; only under client_lock."""
        return fr_client_next_seq(self.relay)

    def write_client_locked(self, bytes body):
        """Write one frame to the client; only under client_lock. Raises OSError."""
        cdef const char *data = body
        cdef size_t n = len(body)
        cdef int rc
        with nogil:
            rc = fr_client_write_locked(self.relay, data, n)
        if rc < 0:
            raise OSError(-rc, os.strerror(-rc))

    def write_backend_locked(self, bytes body):
        """Write one frame to the backend; only under backend_lock. Raises OSError."""
        cdef const char *data = body
        cdef size_t n = len(body)
        cdef int rc
        with nogil:
            rc = fr_backend_write_locked(self.relay, data, n)
        if rc < 0:
            raise OSError(-rc, os.strerror(-rc))

    def start_client(self, int client_in_fd, int python_fd, bytes leftover):
        """The client pump: reads client_in_fd (the bytes in `leftover` first)."""
        cdef int rc = fr_start_client(self.relay, client_in_fd, python_fd, leftover,
                                      len(leftover))
        if rc < 0:
            raise OSError(-rc, os.strerror(-rc))

    def attach_backend(self, int backend_fd, int python_fd):
        """The backend pump on a new connection; returns the connection's generation."""
        cdef int rc
        with nogil:  # takes backend_lock (see claim)
            rc = fr_attach_backend(self.relay, backend_fd, python_fd)
        if rc < 0:
            raise OSError(-rc, os.strerror(-rc))
        return rc

    def detach_backend(self, int generation):
        """The connection takes no more fast requests (those in flight are still relayed)."""
        with nogil:  # takes backend_lock (see claim)
            fr_detach_backend(self.relay, generation)

    def set_plain(self, commands):
        """commands: {command: [(argument, kind mask, required, complex), ...]}."""
        cdef fr_plain_set plain
        cdef fr_command_spec *spec
        cdef fr_arg_spec *arg
        cdef bytes name
        plain.n = 0
        for command, arguments in commands.items():
            name = command.encode()
            if (plain.n >= FR_MAX_COMMANDS or len(name) >= FR_MAX_NAME
                    or len(arguments) > FR_MAX_ARGS):
                raise ValueError(f"{command!r} does not fit the fast relay's tables")
            spec = &plain.commands[plain.n]
            spec.len = len(name)
            memcpy(spec.name, <const char *>name, spec.len)
            spec.name[spec.len] = 0
            spec.nargs = 0
            for argument, mask, required, nested in arguments:
                name = argument.encode()
                if len(name) >= FR_MAX_NAME:
                    raise ValueError(f"{command}.{argument}: name too long for the relay")
                arg = &spec.args[spec.nargs]
                arg.len = len(name)
                memcpy(arg.name, <const char *>name, arg.len)
                arg.name[arg.len] = 0
                arg.mask = mask
                arg.required = required
                arg.complex_ = nested
                spec.nargs += 1
            plain.n += 1
        with nogil:
            fr_set_plain(self.relay, &plain)

    def mark_done(self, bint backend_stream):
        """Python has handled one more frame the core handed it on that stream."""
        fr_mark_done(self.relay, backend_stream)

    def claim(self, int generation, int64_t fast_seq):
        """(client seq, command) of a fast request now answered through Python, or None."""
        cdef int64_t client_seq
        cdef char command[48]
        cdef int found
        # backend_lock may be held by a Python thread between its two halves of a write
        # (backend_lock.__enter__ .. write_backend_locked .. __exit__), which takes the GIL
        # back before it lets go: taking the lock with the GIL held deadlocked the two (a
        # hung CI run, tests/adapter/protocol/test_fast_relay.py)
        with nogil:
            found = fr_claim(self.relay, generation, fast_seq, &client_seq, command)
        if not found:
            return None
        return client_seq, command[:strlen(command)].decode()

    def take_inflight(self, int generation):
        """Every fast request of that connection still unanswered: [(client seq, command)]."""
        cdef int64_t client_seq
        cdef char command[48]
        cdef int found
        out = []
        while True:
            with nogil:  # takes backend_lock (see claim)
                found = fr_take_inflight(self.relay, generation, &client_seq, command)
            if not found:
                return out
            out.append((client_seq, command[:strlen(command)].decode()))

    def stats(self):
        cdef uint64_t values[16]
        fr_stats(self.relay, values)
        return {name: values[i] for i, name in enumerate(STAT_NAMES)}

    def check_request(self, bytes body):
        """Whether the core would send this request body straight to the backend."""
        return bool(fr_check_request(self.relay, body, len(body)))
