/* The fast relay's C core: DAP requests the session declared "plain" go from the client to the
 * backend, and the backend's responses to them back to the client, on two threads that never
 * take the Python interpreter's lock. Everything else is handed to Python, frame by frame.
 *
 * Layer: protocol (C). Knows DAP framing and the envelope of requests and responses; knows
 * nothing of debugpy, Delve, features or VS Code. adapter/protocol/relay.py is its only user
 * (through _fastrelay.pyx) and says why it exists; the rules it keeps are listed there.
 */
#ifndef PTDEBUG_FASTRELAY_CORE_H
#define PTDEBUG_FASTRELAY_CORE_H

#include <stddef.h>
#include <stdint.h>

/* JSON value kinds, as bits: an argument's schema allows a set of them. */
#define FR_T_OBJECT 1
#define FR_T_ARRAY 2
#define FR_T_STRING 4
#define FR_T_INTEGER 8 /* a number written without fraction or exponent */
#define FR_T_NUMBER 16
#define FR_T_BOOL 32
#define FR_T_NULL 64
#define FR_T_ANY 127

#define FR_MAX_NAME 48      /* command and argument names, with the NUL */
#define FR_MAX_ARGS 24      /* declared arguments of one command */
#define FR_MAX_COMMANDS 64  /* plain commands */
#define FR_SEQ_BASE 1000000000LL
/* Requests the relay sends to the backend are numbered from here; the backend channel's own
 * requests (Python's) count from 1 and never come near it. */

typedef struct {
    char name[FR_MAX_NAME];
    int len;
    int mask;      /* FR_T_* bits the value may have */
    int required;
    int complex_;  /* nested schema (object properties, items, enum): only Python checks it */
} fr_arg_spec;

typedef struct {
    char name[FR_MAX_NAME];
    int len;
    int nargs;
    fr_arg_spec args[FR_MAX_ARGS];
} fr_command_spec;

typedef struct {
    int n;
    fr_command_spec commands[FR_MAX_COMMANDS];
} fr_plain_set;

enum { FR_STAT_FAST_REQUESTS, FR_STAT_FAST_RESPONSES, FR_STAT_CLIENT_TO_PYTHON,
       FR_STAT_BACKEND_TO_PYTHON, FR_STAT_DEFERRED_RESPONSES, FR_STAT_COUNT };

typedef struct fr_relay fr_relay;

fr_relay *fr_new(int client_out_fd);
/* Run the relay thread on `cpu` (now, or as soon as it starts). */
void fr_set_cpu(fr_relay *r, int cpu);
void fr_release(fr_relay *r);

void fr_client_lock(fr_relay *r);
void fr_client_unlock(fr_relay *r);
int64_t fr_client_next_seq(fr_relay *r);
int fr_client_write_locked(fr_relay *r, const char *body, size_t len);
int fr_start_client(fr_relay *r, int client_in_fd, int python_fd, const char *leftover,
                    size_t leftover_len);

int fr_attach_backend(fr_relay *r, int backend_fd, int python_fd);
void fr_detach_backend(fr_relay *r, int generation);
void fr_backend_lock(fr_relay *r);
void fr_backend_unlock(fr_relay *r);
int fr_backend_write_locked(fr_relay *r, const char *body, size_t len);

void fr_set_plain(fr_relay *r, const fr_plain_set *plain);
void fr_mark_done(fr_relay *r, int backend_stream);
int fr_claim(fr_relay *r, int generation, int64_t fast_seq, int64_t *client_seq,
             char *command);
int fr_take_inflight(fr_relay *r, int generation, int64_t *client_seq, char *command);
void fr_stats(fr_relay *r, uint64_t *out);

/* Exposed for the tests: 1 when `body` is a request the plain set lets through. */
int fr_check_request(fr_relay *r, const char *body, size_t len);

#endif
