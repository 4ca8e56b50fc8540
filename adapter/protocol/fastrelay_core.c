/* The fast relay's C core (see fastrelay_core.h and adapter/protocol/relay.py).
 *
 * One thread, which never holds the Python interpreter's lock, reads both streams:
 * - the client's frames: a well-formed request of the plain set, sent while Python has nothing
 *   of the client's left to handle, is written to the backend with its `seq` renumbered into
 *   the relay's range (FR_SEQ_BASE...); every other frame is written as it came to Python's
 *   end of a socket pair, which the client Channel reads.
 * - the backend's frames: a response to one of the relay's requests, arriving while Python has
 *   nothing of the backend's left to handle, is written to the client with `request_seq` set
 *   back to the client's and `seq` the client stream's next number; every other frame goes to
 *   Python's end of a second socket pair, which the backend Channel reads.
 * "Nothing left to handle" is counted: frames handed to Python against frames Python has
 * finished (fr_mark_done), so nothing the relay writes ever overtakes what Python still has to
 * write (an event before a response stays before it; a request after one Python forwards
 * stays after it).
 *
 * What the relay cannot read for certain (a header it does not understand, JSON it does not
 * accept, a request with a nested argument the schema describes) goes to Python unchanged, so
 * Python's own framing and checks answer it exactly as without the relay. The JSON accepted is
 * RFC 8259 with stricter limits (requests: ASCII and no \u escapes; nesting at most 128).
 * A header it cannot read switches that stream to passthrough: every byte to Python, for good.
 */
#define _GNU_SOURCE /* pipe2, sched_setaffinity */
#include "fastrelay_core.h"
#include "fastrelay_json.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_CONTENT_LENGTH (16u * 1024u * 1024u) /* framing.py MAX_CONTENT_LENGTH */
#define MAX_HEADER_LINE 1024                       /* framing.py MAX_HEADER_LINE */
#define MAX_HEADER_LINES 16                        /* framing.py MAX_HEADER_LINES */
#define MAX_FAST_REQUEST 65536                     /* larger requests go through Python */
#define MAX_MEMBERS FR_JSON_MAX_MEMBERS
#define SLOTS 1024                                 /* fast requests in flight at once */

typedef struct {
    char *data;
    size_t len, cap;
} buffer_t;

typedef struct {
    int in, python, generation; /* -1 descriptors when none */
    int passthrough;
    buffer_t buffer;
} stream_t;

typedef struct {
    int64_t fast_seq, client_seq;
    int generation, used;
    char command[FR_MAX_NAME];
} slot_t;

struct fr_relay {
    atomic_int refs;
    pthread_mutex_t client_lock;  /* writes to the client, and its seq */
    int client_out;
    int64_t client_seq;
    pthread_mutex_t backend_lock; /* writes to the backend, the slots, the connection */
    int backend_out;              /* -1 when none */
    int generation;               /* of the backend connection now attached */
    int backend_fast;             /* the connection takes fast requests */
    int64_t next_fast;
    slot_t slots[SLOTS];
    pthread_mutex_t plain_lock;
    fr_plain_set *plain;
    atomic_ullong handed[2], done[2]; /* [0] client stream, [1] backend stream */
    atomic_ullong stats[FR_STAT_COUNT];
    stream_t pending[2];          /* streams handed over, not yet taken by the thread */
    int wake[2];                  /* a pipe: a byte wakes the thread to take them */
    int thread_started;           /* under backend_lock */
    atomic_int handed_over;       /* set with pending: the thread looks under the lock */
    atomic_int thread_tid;        /* the relay thread's kernel id once it runs, else 0 */
    atomic_int want_cpu;          /* the CPU the thread should run on, or -1 (fr_set_cpu) */
};


/* ---- small I/O helpers ------------------------------------------------------------------- */
static int write_all_iov(int fd, struct iovec *iov, int n) {
    while (n > 0) {
        ssize_t w = writev(fd, iov, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return 0;
}

static int write_all(int fd, const char *data, size_t len) {
    struct iovec iov = {(void *)data, len};
    return write_all_iov(fd, &iov, 1);
}

/* Reads more bytes into b; >0 read, 0 end of stream, <0 error. */
static ssize_t fill(int fd, buffer_t *b, size_t want) {
    if (b->cap - b->len < want) {
        size_t cap = b->cap ? b->cap : 65536;
        while (cap - b->len < want)
            cap *= 2;
        char *data = realloc(b->data, cap);
        if (data == NULL)
            return -ENOMEM;
        b->data = data;
        b->cap = cap;
    }
    for (;;) {
        ssize_t r = read(fd, b->data + b->len, b->cap - b->len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r > 0)
            b->len += (size_t)r;
        return r < 0 ? -errno : r;
    }
}

static void consume(buffer_t *b, size_t n) {
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

/* ---- the header --------------------------------------------------------------------------- */
/* 1: header of `*header_len` bytes announcing `*body_len`; 0: need more bytes; -1: a header
 * this relay does not read (Python's framing will say what is wrong with it, or accept it). */
static int parse_header(const char *p, size_t n, size_t *header_len, size_t *body_len) {
    size_t pos = 0;
    if (n == 0)
        return 0;
    long long length = -1;
    for (int lines = 0; lines <= MAX_HEADER_LINES; lines++) {
        const char *nl = memchr(p + pos, '\n', n - pos);
        if (nl == NULL)
            return n - pos > MAX_HEADER_LINE ? -1 : 0;
        size_t end = (size_t)(nl - p), line_len = end + 1 - pos;
        if (line_len > MAX_HEADER_LINE)
            return -1;
        size_t stop = end;
        if (stop > pos && p[stop - 1] == '\r')
            stop--;
        if (stop == pos) {
            if (lines == 0 || length < 0)
                return -1; /* a stray empty line, or no Content-Length: Python decides */
            *header_len = end + 1;
            *body_len = (size_t)length;
            return 1;
        }
        const char *colon = memchr(p + pos, ':', stop - pos);
        if (colon == NULL)
            return -1;
        const char *name = p + pos, *name_end = colon;
        while (name < name_end && (*name == ' ' || *name == '\t'))
            name++;
        while (name_end > name && (name_end[-1] == ' ' || name_end[-1] == '\t'))
            name_end--;
        if (name_end - name == 14 && strncasecmp(name, "content-length", 14) == 0) {
            const char *v = colon + 1, *v_end = p + stop;
            while (v < v_end && (*v == ' ' || *v == '\t'))
                v++;
            while (v_end > v && (v_end[-1] == ' ' || v_end[-1] == '\t'))
                v_end--;
            if (v == v_end || v_end - v > 9)
                return -1;
            length = 0;
            for (; v < v_end; v++) {
                if (*v < '0' || *v > '9')
                    return -1;
                length = length * 10 + (*v - '0');
            }
            if (length > MAX_CONTENT_LENGTH)
                return -1;
        }
        pos = end + 1;
    }
    return -1;
}

/* ---- which requests are plain --------------------------------------------------------------- */
typedef struct {
    int64_t seq;
    const member_t *seq_member;
    char command[FR_MAX_NAME];
} fast_request_t;

/* 1 when `body` is a well-formed request of the plain set whose arguments pass the checks
 * Python would make (validate.py, flattened to the arguments' own fields). */
static int check_request(fr_relay *r, const char *body, size_t len, member_t *top,
                         fast_request_t *out) {
    if (len > MAX_FAST_REQUEST)
        return 0;
    json_t j = {body + len, 1};
    int n = fr_scan_message(&j, body, top);
    if (n < 0 || fr_has_duplicate_keys(top, n))
        return 0;
    int dup = 0;
    const member_t *seq = fr_find(top, n, "seq", &dup), *type = fr_find(top, n, "type", &dup),
                   *command = fr_find(top, n, "command", &dup),
                   *arguments = fr_find(top, n, "arguments", &dup);
    if (!fr_string_is(type, "request") || !fr_parse_int64(seq, &out->seq) || command == NULL ||
        command->kind != FR_T_STRING || command->value_len < 3 ||
        command->value_len - 2 >= FR_MAX_NAME ||
        memchr(command->value, '\\', command->value_len) != NULL)
        return 0;
    if (arguments != NULL && arguments->kind != FR_T_OBJECT && arguments->kind != FR_T_NULL)
        return 0; /* Python answers that 'arguments' must be an object */
    member_t args[MAX_MEMBERS];
    int nargs = 0;
    if (arguments != NULL && arguments->kind == FR_T_OBJECT) {
        json_t a = {arguments->value + arguments->value_len, 1};
        nargs = fr_scan_message(&a, arguments->value, args);
        if (nargs < 0 || fr_has_duplicate_keys(args, nargs))
            return 0;
    }
    size_t name_len = command->value_len - 2;
    memcpy(out->command, command->value + 1, name_len);
    out->command[name_len] = '\0';
    out->seq_member = seq;
    int ok = 0;
    pthread_mutex_lock(&r->plain_lock);
    const fr_plain_set *plain = r->plain;
    for (int c = 0; plain != NULL && c < plain->n; c++) {
        const fr_command_spec *spec = &plain->commands[c];
        if ((size_t)spec->len != name_len || memcmp(spec->name, out->command, name_len) != 0)
            continue;
        ok = 1;
        for (int a = 0; a < spec->nargs && ok; a++) {
            const fr_arg_spec *arg = &spec->args[a];
            const member_t *value = fr_find(args, nargs, arg->name, &dup);
            if (value == NULL)
                ok = !arg->required;
            else
                ok = !arg->complex_ && (value->kind & arg->mask) != 0;
        }
        break;
    }
    pthread_mutex_unlock(&r->plain_lock);
    return ok;
}

int fr_check_request(fr_relay *r, const char *body, size_t len) {
    member_t top[MAX_MEMBERS];
    fast_request_t request;
    return check_request(r, body, len, top, &request);
}

/* ---- the relay ---------------------------------------------------------------------------- */
fr_relay *fr_new(int client_out_fd) {
    fr_relay *r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    r->client_out = dup(client_out_fd);
    if (r->client_out < 0) {
        free(r);
        return NULL;
    }
    atomic_init(&r->refs, 1);
    pthread_mutex_init(&r->client_lock, NULL);
    pthread_mutex_init(&r->backend_lock, NULL);
    pthread_mutex_init(&r->plain_lock, NULL);
    r->backend_out = -1;
    atomic_init(&r->want_cpu, -1);
    r->next_fast = FR_SEQ_BASE;
    r->pending[0].in = r->pending[1].in = -1;
    if (pipe2(r->wake, O_NONBLOCK | O_CLOEXEC) < 0) {
        close(r->client_out);
        free(r);
        return NULL;
    }
    return r;
}

void fr_release(fr_relay *r) {
    if (atomic_fetch_sub(&r->refs, 1) != 1)
        return;
    close(r->client_out);
    close(r->wake[0]);
    close(r->wake[1]);
    for (int i = 0; i < 2; i++)
        if (r->pending[i].in >= 0) {
            close(r->pending[i].in);
            close(r->pending[i].python);
            free(r->pending[i].buffer.data);
        }
    if (r->backend_out >= 0)
        close(r->backend_out);
    free(r->plain);
    pthread_mutex_destroy(&r->client_lock);
    pthread_mutex_destroy(&r->backend_lock);
    pthread_mutex_destroy(&r->plain_lock);
    free(r);
}

void fr_client_lock(fr_relay *r) { pthread_mutex_lock(&r->client_lock); }
void fr_client_unlock(fr_relay *r) { pthread_mutex_unlock(&r->client_lock); }
int64_t fr_client_next_seq(fr_relay *r) { return ++r->client_seq; }
void fr_backend_lock(fr_relay *r) { pthread_mutex_lock(&r->backend_lock); }
void fr_backend_unlock(fr_relay *r) { pthread_mutex_unlock(&r->backend_lock); }

static int write_frame(int fd, const char *body, size_t len) {
    char header[40];
    int h = snprintf(header, sizeof header, "Content-Length: %zu\r\n\r\n", len);
    struct iovec iov[2] = {{header, (size_t)h}, {(void *)body, len}};
    return write_all_iov(fd, iov, 2);
}

int fr_client_write_locked(fr_relay *r, const char *body, size_t len) {
    return write_frame(r->client_out, body, len);
}

int fr_backend_write_locked(fr_relay *r, const char *body, size_t len) {
    return r->backend_out < 0 ? -EPIPE : write_frame(r->backend_out, body, len);
}

void fr_set_plain(fr_relay *r, const fr_plain_set *plain) {
    fr_plain_set *copy = NULL;
    if (plain != NULL && plain->n > 0) {
        copy = malloc(sizeof *copy);
        if (copy != NULL)
            memcpy(copy, plain, sizeof *copy);
    }
    pthread_mutex_lock(&r->plain_lock);
    fr_plain_set *old = r->plain;
    r->plain = copy;
    pthread_mutex_unlock(&r->plain_lock);
    free(old);
}

void fr_mark_done(fr_relay *r, int backend_stream) {
    atomic_fetch_add(&r->done[backend_stream ? 1 : 0], 1);
}

static int python_idle(fr_relay *r, int stream) {
    return atomic_load(&r->handed[stream]) == atomic_load(&r->done[stream]);
}

static int to_python(fr_relay *r, int stream, int fd, const char *frame, size_t len) {
    atomic_fetch_add(&r->handed[stream], 1); /* counted before Python can see it */
    return write_all(fd, frame, len);
}

/* Writes `body` with the values of `a` and `b` (either order, either may be NULL) replaced
 * by the numbers `va` and `vb`, as one frame. */
static int write_renumbered(int fd, const char *body, size_t len, const member_t *a,
                            int64_t va, const member_t *b, int64_t vb) {
    if (a != NULL && b != NULL && b->value < a->value) {
        const member_t *m = a;
        a = b;
        b = m;
        int64_t v = va;
        va = vb;
        vb = v;
    }
    char header[40], da[24], db[24];
    struct iovec iov[6];
    int n = 1, la = a ? snprintf(da, sizeof da, "%lld", (long long)va) : 0,
        lb = b ? snprintf(db, sizeof db, "%lld", (long long)vb) : 0;
    size_t total = len - (a ? a->value_len : 0) - (b ? b->value_len : 0) + (size_t)la + (size_t)lb;
    const char *p = body;
    if (a) {
        iov[n++] = (struct iovec){(void *)p, (size_t)(a->value - p)};
        iov[n++] = (struct iovec){da, (size_t)la};
        p = a->value + a->value_len;
    }
    if (b) {
        iov[n++] = (struct iovec){(void *)p, (size_t)(b->value - p)};
        iov[n++] = (struct iovec){db, (size_t)lb};
        p = b->value + b->value_len;
    }
    iov[n++] = (struct iovec){(void *)p, (size_t)(body + len - p)};
    iov[0] = (struct iovec){header,
                            (size_t)snprintf(header, sizeof header,
                                             "Content-Length: %zu\r\n\r\n", total)};
    return write_all_iov(fd, iov, n);
}

/* The client pump's fast path: 1 when the request went to the backend. */
static int forward_fast(fr_relay *r, const char *body, size_t len) {
    member_t top[MAX_MEMBERS];
    fast_request_t request;
    if (!python_idle(r, 0) || !check_request(r, body, len, top, &request))
        return 0;
    int sent = 0;
    pthread_mutex_lock(&r->backend_lock);
    if (r->backend_fast && r->backend_out >= 0) {
        slot_t *slot = &r->slots[(r->next_fast - FR_SEQ_BASE) % SLOTS];
        if (!slot->used) {
            int64_t fast_seq = r->next_fast++;
            *slot = (slot_t){fast_seq, request.seq, r->generation, 1, {0}};
            memcpy(slot->command, request.command, sizeof request.command);
            if (write_renumbered(r->backend_out, body, len, request.seq_member, fast_seq, NULL,
                                 0) == 0) {
                sent = 1;
            } else {
                slot->used = 0; /* the backend is gone: Python says so to the client */
                r->backend_fast = 0;
            }
        }
    }
    pthread_mutex_unlock(&r->backend_lock);
    if (sent)
        atomic_fetch_add(&r->stats[FR_STAT_FAST_REQUESTS], 1);
    return sent;
}

/* The backend pump's fast path: 1 when the response went to the client. */
static int relay_fast(fr_relay *r, int generation, const char *body, size_t len) {
    member_t top[MAX_MEMBERS];
    json_t j = {body + len, 0};
    int n = fr_scan_message(&j, body, top), dup = 0;
    if (n < 0)
        return 0;
    const member_t *type = fr_find(top, n, "type", &dup), *seq = fr_find(top, n, "seq", &dup),
                   *request_seq = fr_find(top, n, "request_seq", &dup),
                   *command = fr_find(top, n, "command", &dup),
                   *success = fr_find(top, n, "success", &dup), *b = fr_find(top, n, "body", &dup);
    int64_t fast_seq, ignored;
    if (dup || !fr_string_is(type, "response") || !fr_parse_int64(request_seq, &fast_seq) ||
        fast_seq < FR_SEQ_BASE || !fr_parse_int64(seq, &ignored) || command == NULL ||
        command->kind != FR_T_STRING || success == NULL || success->kind != FR_T_BOOL)
        return 0;
    if (success->value[0] == 'f') {
        /* relayed as it is only with the error body DAP requires (else Python adds one) */
        member_t members[MAX_MEMBERS];
        const member_t *error = NULL;
        if (b != NULL && b->kind == FR_T_OBJECT) {
            json_t bj = {b->value + b->value_len, 0};
            int nb = fr_scan_message(&bj, b->value, members);
            error = nb < 0 ? NULL : fr_find(members, nb, "error", &dup);
        }
        if (error == NULL || error->kind != FR_T_OBJECT || dup)
            return 0;
    }
    if (!python_idle(r, 1)) {
        atomic_fetch_add(&r->stats[FR_STAT_DEFERRED_RESPONSES], 1);
        return 0; /* Python is still writing what came before: it relays this one too */
    }
    int64_t client_seq = 0;
    int found = 0;
    pthread_mutex_lock(&r->backend_lock);
    slot_t *slot = &r->slots[(fast_seq - FR_SEQ_BASE) % SLOTS];
    if (slot->used && slot->fast_seq == fast_seq && slot->generation == generation) {
        client_seq = slot->client_seq;
        slot->used = 0;
        found = 1;
    }
    pthread_mutex_unlock(&r->backend_lock);
    if (!found)
        return 0;
    atomic_fetch_add(&r->stats[FR_STAT_FAST_RESPONSES], 1); /* counted before anyone sees it */
    pthread_mutex_lock(&r->client_lock);
    write_renumbered(r->client_out, body, len, seq, ++r->client_seq, request_seq, client_seq);
    pthread_mutex_unlock(&r->client_lock);
    return 1; /* a client that is gone is noticed by its own reader */
}

/* ---- the relay thread --------------------------------------------------------------------- */
/* One thread serves both streams (poll(2) on both). Waking a sleeping thread is the dearest
 * part of a hop on the development VM (an idle vCPU halts at once: no guest halt polling), and
 * a request and its response then wake the same thread, not two. Polling instead of sleeping
 * while an answer was due was measured and did not help end to end (docs/PERFORMANCE.md). */
static void end_stream(fr_relay *r, stream_t *s, int backend) {
    if (s->in < 0)
        return;
    if (s->buffer.len && !s->passthrough)
        write_all(s->python, s->buffer.data, s->buffer.len); /* Python reports the cut */
    if (backend) {
        pthread_mutex_lock(&r->backend_lock);
        if (r->generation == s->generation)
            r->backend_fast = 0;
        pthread_mutex_unlock(&r->backend_lock);
    }
    shutdown(s->python, SHUT_WR); /* Python's reader sees the end of the stream */
    close(s->python);
    close(s->in);
    s->in = s->python = -1;
    s->buffer.len = 0;
    s->passthrough = 0;
}

static int frames(fr_relay *r, stream_t *s, int backend);

/* Reads what `s` has and handles every whole frame in it; 0 at the end of the stream. */
static int pump(fr_relay *r, stream_t *s, int backend) {
    if (fill(s->in, &s->buffer, 65536) <= 0)
        return 0;
    return frames(r, s, backend);
}

static int frames(fr_relay *r, stream_t *s, int backend) {
    buffer_t *b = &s->buffer;
    if (s->passthrough) {
        int ok = write_all(s->python, b->data, b->len) == 0;
        b->len = 0;
        return ok;
    }
    for (;;) {
        size_t header_len = 0, body_len = 0;
        int state = parse_header(b->data, b->len, &header_len, &body_len);
        if (state < 0) {
            /* a header the relay does not read: Python gets every byte from here on */
            s->passthrough = 1;
            int ok = write_all(s->python, b->data, b->len) == 0;
            b->len = 0;
            return ok;
        }
        if (state == 0 || b->len < header_len + body_len)
            return 1;
        const char *body = b->data + header_len;
        int fast = backend ? relay_fast(r, s->generation, body, body_len)
                           : forward_fast(r, body, body_len);
        if (!fast) {
            atomic_fetch_add(&r->stats[backend ? FR_STAT_BACKEND_TO_PYTHON
                                               : FR_STAT_CLIENT_TO_PYTHON], 1);
            if (to_python(r, backend, s->python, b->data, header_len + body_len) < 0)
                return 0; /* Python stopped reading: the stream is over for it */
        }
        consume(b, header_len + body_len);
    }
}

static void pin_thread(int tid, int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(tid, sizeof set, &set); /* best effort: a refused CPU changes nothing */
}

void fr_set_cpu(fr_relay *r, int cpu) {
    /* stored first, then the thread's id read: either this call or the thread's start sees
       the other (sequentially consistent atomics), so the pin is never lost */
    atomic_store(&r->want_cpu, cpu);
    int tid = atomic_load(&r->thread_tid);
    if (tid > 0 && cpu >= 0)
        pin_thread(tid, cpu);
}

static void *relay_thread(void *arg) {
    fr_relay *r = arg;
    atomic_store(&r->thread_tid, (int)syscall(SYS_gettid));
    int cpu = atomic_load(&r->want_cpu);
    if (cpu >= 0)
        pin_thread(0, cpu);
    stream_t streams[2] = {{-1, -1, 0, 0, {NULL, 0, 0}}, {-1, -1, 0, 0, {NULL, 0, 0}}};
    for (;;) {
        /* take the streams Python handed over since the last turn */
        int taken[2] = {0, 0};
        if (!atomic_exchange(&r->handed_over, 0) && (streams[0].in >= 0 || streams[1].in >= 0))
            goto serve;
        pthread_mutex_lock(&r->backend_lock);
        for (int i = 0; i < 2; i++) {
            if (r->pending[i].in < 0)
                continue;
            end_stream(r, &streams[i], i);
            free(streams[i].buffer.data);
            streams[i] = r->pending[i];
            r->pending[i] = (stream_t){-1, -1, 0, 0, {NULL, 0, 0}};
            taken[i] = 1;
        }
        if (streams[0].in < 0 && streams[1].in < 0) {
            r->thread_started = 0; /* nothing left to serve; a new hand-over starts anew */
            pthread_mutex_unlock(&r->backend_lock);
            break;
        }
        pthread_mutex_unlock(&r->backend_lock);
        for (int i = 0; i < 2; i++) /* bytes Python had read ahead come first */
            if (taken[i] && streams[i].buffer.len && !frames(r, &streams[i], i))
                end_stream(r, &streams[i], i);
    serve:;
        struct pollfd fds[3] = {{r->wake[0], POLLIN, 0}, {streams[0].in, POLLIN, 0},
                                {streams[1].in, POLLIN, 0}};
        int n = poll(fds, 3, -1);
        if (n < 0 && errno != EINTR)
            break;
        if (n <= 0)
            continue;
        if (fds[0].revents) {
            char drain[64];
            if (read(r->wake[0], drain, sizeof drain) < 0 && errno != EAGAIN && errno != EINTR)
                break;
        }
        for (int i = 0; i < 2; i++)
            if (fds[i + 1].revents && !pump(r, &streams[i], i))
                end_stream(r, &streams[i], i);
    }
    for (int i = 0; i < 2; i++) {
        end_stream(r, &streams[i], i);
        free(streams[i].buffer.data);
    }
    fr_release(r);
    return NULL;
}

/* Hands a stream to the relay thread (started on the first one). */
static int hand_over(fr_relay *r, int which, int in_fd, int python_fd, int generation,
                     const char *leftover, size_t leftover_len) {
    int in = dup(in_fd), python = dup(python_fd);
    char *data = leftover_len ? malloc(leftover_len) : NULL;
    if (in < 0 || python < 0 || (leftover_len && data == NULL)) {
        int err = in < 0 || python < 0 ? -errno : -ENOMEM;
        if (in >= 0)
            close(in);
        if (python >= 0)
            close(python);
        free(data);
        return err;
    }
    if (leftover_len)
        memcpy(data, leftover, leftover_len);
    pthread_mutex_lock(&r->backend_lock);
    stream_t *p = &r->pending[which];
    if (p->in >= 0) { /* handed over twice before the thread took the first: drop it */
        close(p->in);
        close(p->python);
        free(p->buffer.data);
    }
    *p = (stream_t){in, python, generation, 0, {data, leftover_len, leftover_len}};
    atomic_store(&r->handed_over, 1);
    int rc = 0;
    if (!r->thread_started) {
        atomic_fetch_add(&r->refs, 1);
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        rc = -pthread_create(&thread, &attr, relay_thread, r);
        pthread_attr_destroy(&attr);
        if (rc == 0)
            r->thread_started = 1;
        else
            atomic_fetch_sub(&r->refs, 1);
    }
    pthread_mutex_unlock(&r->backend_lock);
    if (write(r->wake[1], "w", 1) < 0 && errno != EAGAIN)
        return -errno;
    return rc;
}

int fr_start_client(fr_relay *r, int client_in_fd, int python_fd, const char *leftover,
                    size_t leftover_len) {
    return hand_over(r, 0, client_in_fd, python_fd, 0, leftover, leftover_len);
}

int fr_attach_backend(fr_relay *r, int backend_fd, int python_fd) {
    int out = dup(backend_fd);
    if (out < 0)
        return -errno;
    pthread_mutex_lock(&r->backend_lock);
    int generation = ++r->generation;
    if (r->backend_out >= 0)
        close(r->backend_out);
    r->backend_out = out;
    r->backend_fast = 1;
    pthread_mutex_unlock(&r->backend_lock);
    int rc = hand_over(r, 1, backend_fd, python_fd, generation, NULL, 0);
    if (rc < 0) {
        fr_detach_backend(r, generation);
        return rc;
    }
    return generation;
}

void fr_detach_backend(fr_relay *r, int generation) {
    pthread_mutex_lock(&r->backend_lock);
    if (r->generation == generation)
        r->backend_fast = 0;
    pthread_mutex_unlock(&r->backend_lock);
}

static int take(fr_relay *r, int generation, int64_t fast_seq, int64_t *client_seq,
                char *command) {
    int found = 0;
    pthread_mutex_lock(&r->backend_lock);
    for (int i = 0; i < SLOTS && !found; i++) {
        slot_t *slot = &r->slots[i];
        if (slot->used && slot->generation == generation &&
            (fast_seq < 0 || slot->fast_seq == fast_seq)) {
            *client_seq = slot->client_seq;
            memcpy(command, slot->command, FR_MAX_NAME);
            slot->used = 0;
                found = 1;
        }
    }
    pthread_mutex_unlock(&r->backend_lock);
    return found;
}

int fr_claim(fr_relay *r, int generation, int64_t fast_seq, int64_t *client_seq,
             char *command) {
    return fast_seq >= FR_SEQ_BASE && take(r, generation, fast_seq, client_seq, command);
}

int fr_take_inflight(fr_relay *r, int generation, int64_t *client_seq, char *command) {
    return take(r, generation, -1, client_seq, command);
}

void fr_stats(fr_relay *r, uint64_t *out) {
    for (int i = 0; i < FR_STAT_COUNT; i++)
        out[i] = atomic_load(&r->stats[i]);
}
