/* The JSON the fast relay reads: RFC 8259 scanning that validates a whole message and notes
 * where each member of an object is, without building anything.
 *
 * Layer: protocol (C), below fastrelay_core.c. Knows JSON only. Stricter than Python's json
 * module on purpose (no NaN, nesting at most FR_JSON_MAX_DEPTH, and in `ascii_only` mode no
 * byte above 0x7f and no \u escape): what it refuses, Python reads instead.
 */
#ifndef PTDEBUG_FASTRELAY_JSON_H
#define PTDEBUG_FASTRELAY_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "fastrelay_core.h" /* FR_T_* */

#define FR_JSON_MAX_DEPTH 128
#define FR_JSON_MAX_MEMBERS 32 /* members of an object noted; more and the scan refuses it */

typedef struct {
    const char *end;
    int ascii_only; /* requests: no byte above 0x7f, no \u escape */
} json_t;

typedef struct {
    const char *key;     /* the key's raw text between its quotes */
    size_t key_len;
    const char *value;   /* the value's text */
    size_t value_len;
    int kind;            /* FR_T_* */
} member_t;

/* The members of a whole message (one object, white space around it); their count, or -1
 * when it is not one JSON object or has more than FR_JSON_MAX_MEMBERS members. */
int fr_scan_message(const json_t *j, const char *p, member_t *members);
/* The member named `name`, NULL if absent; *dup set when it appears twice. */
const member_t *fr_find(const member_t *m, int n, const char *name, int *dup);
int fr_has_duplicate_keys(const member_t *m, int n);
/* An integer member's value (at most 18 digits); 0 if it is not one. */
int fr_parse_int64(const member_t *m, int64_t *out);
/* Whether the member is the string `text` (written without escapes). */
int fr_string_is(const member_t *m, const char *text);

#endif
