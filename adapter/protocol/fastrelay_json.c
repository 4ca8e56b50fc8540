/* The fast relay's JSON scanning (see fastrelay_json.h). */
#include "fastrelay_json.h"

#include <string.h>

#define MAX_DEPTH FR_JSON_MAX_DEPTH
#define MAX_MEMBERS FR_JSON_MAX_MEMBERS

/* ---- JSON --------------------------------------------------------------------------------- */
static const char *skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

static int hex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* After the opening quote; returns the position after the closing quote, or NULL. */
static const char *scan_string(const json_t *j, const char *p) {
    const char *end = j->end;
    while (p < end) {
        unsigned char c = (unsigned char)*p;
        if (c == '"')
            return p + 1;
        if (c < 0x20)
            return NULL;
        if (c == '\\') {
            if (++p >= end)
                return NULL;
            char e = *p;
            if (e == 'u') {
                if (j->ascii_only || end - p < 5 || !hex(p[1]) || !hex(p[2]) || !hex(p[3]) ||
                    !hex(p[4]))
                    return NULL;
                p += 5;
            } else if (strchr("\"\\/bfnrt", e) != NULL && e != '\0') {
                p++;
            } else {
                return NULL;
            }
            continue;
        }
        if (c < 0x80) {
            p++;
            continue;
        }
        if (j->ascii_only)
            return NULL;
        /* UTF-8 as Python's strict decoder takes it: no overlong forms, no surrogates. */
        int n;
        unsigned int cp;
        if (c >= 0xc2 && c <= 0xdf) {
            n = 1;
            cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            n = 2;
            cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 3;
            cp = c & 0x07;
        } else {
            return NULL;
        }
        if (end - p <= n)
            return NULL;
        for (int i = 1; i <= n; i++) {
            unsigned char k = (unsigned char)p[i];
            if ((k & 0xc0) != 0x80)
                return NULL;
            cp = (cp << 6) | (k & 0x3f);
        }
        if ((n == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
            (n == 3 && (cp < 0x10000 || cp > 0x10ffff)))
            return NULL;
        p += n + 1;
    }
    return NULL;
}

static const char *scan_value(const json_t *j, const char *p, int depth, int *kind);

/* An object after its '{'; records up to `cap` members (more: *count = cap + 1). */
static const char *scan_object(const json_t *j, const char *p, int depth, member_t *members,
                               int cap, int *count) {
    const char *end = j->end;
    int n = 0;
    p = skip_ws(p, end);
    if (p < end && *p == '}') {
        if (count)
            *count = 0;
        return p + 1;
    }
    for (;;) {
        if (p >= end || *p != '"')
            return NULL;
        const char *key = p + 1;
        p = scan_string(j, key);
        if (p == NULL)
            return NULL;
        size_t key_len = (size_t)(p - 1 - key);
        p = skip_ws(p, end);
        if (p >= end || *p != ':')
            return NULL;
        p = skip_ws(p + 1, end);
        const char *value = p;
        int kind;
        p = scan_value(j, p, depth + 1, &kind);
        if (p == NULL)
            return NULL;
        if (members != NULL) {
            if (n < cap)
                members[n] = (member_t){key, key_len, value, (size_t)(p - value), kind};
            if (n <= cap)
                n++;
        }
        p = skip_ws(p, end);
        if (p < end && *p == ',') {
            p = skip_ws(p + 1, end);
            continue;
        }
        if (p < end && *p == '}') {
            if (count)
                *count = n;
            return p + 1;
        }
        return NULL;
    }
}

static const char *scan_number(const char *p, const char *end, int *kind) {
    *kind = FR_T_INTEGER | FR_T_NUMBER;
    if (p < end && *p == '-')
        p++;
    if (p >= end)
        return NULL;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    } else {
        return NULL;
    }
    if (p < end && *p == '.') {
        *kind = FR_T_NUMBER;
        p++;
        if (p >= end || *p < '0' || *p > '9')
            return NULL;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *kind = FR_T_NUMBER;
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || *p < '0' || *p > '9')
            return NULL;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    return p;
}

static const char *literal(const char *p, const char *end, const char *word, size_t n) {
    return (size_t)(end - p) >= n && memcmp(p, word, n) == 0 ? p + n : NULL;
}

static const char *scan_value(const json_t *j, const char *p, int depth, int *kind) {
    const char *end = j->end;
    if (p >= end || depth > MAX_DEPTH)
        return NULL;
    switch (*p) {
    case '{':
        *kind = FR_T_OBJECT;
        return scan_object(j, p + 1, depth, NULL, 0, NULL);
    case '[':
        *kind = FR_T_ARRAY;
        p = skip_ws(p + 1, end);
        if (p < end && *p == ']')
            return p + 1;
        for (;;) {
            int item;
            p = scan_value(j, p, depth + 1, &item);
            if (p == NULL)
                return NULL;
            p = skip_ws(p, end);
            if (p < end && *p == ',') {
                p = skip_ws(p + 1, end);
                continue;
            }
            return p < end && *p == ']' ? p + 1 : NULL;
        }
    case '"':
        *kind = FR_T_STRING;
        return scan_string(j, p + 1);
    case 't':
        *kind = FR_T_BOOL;
        return literal(p, end, "true", 4);
    case 'f':
        *kind = FR_T_BOOL;
        return literal(p, end, "false", 5);
    case 'n':
        *kind = FR_T_NULL;
        return literal(p, end, "null", 4);
    default:
        return scan_number(p, end, kind);
    }
}

/* The members of a whole message (one object, white space around it); count or -1. */
int fr_scan_message(const json_t *j, const char *p, member_t *members) {
    int count = 0;
    p = skip_ws(p, j->end);
    if (p >= j->end || *p != '{')
        return -1;
    p = scan_object(j, p + 1, 1, members, MAX_MEMBERS, &count);
    if (p == NULL || skip_ws(p, j->end) != j->end || count > MAX_MEMBERS)
        return -1;
    return count;
}

static int key_is(const member_t *m, const char *name) {
    size_t n = strlen(name);
    return m->key_len == n && memcmp(m->key, name, n) == 0;
}

/* The member named `name`, NULL if absent; *dup set when it appears twice. */
const member_t *fr_find(const member_t *m, int n, const char *name, int *dup) {
    const member_t *found = NULL;
    for (int i = 0; i < n; i++)
        if (key_is(&m[i], name)) {
            if (found)
                *dup = 1;
            found = &m[i];
        }
    return found;
}

int fr_has_duplicate_keys(const member_t *m, int n) {
    for (int i = 0; i < n; i++)
        for (int k = i + 1; k < n; k++)
            if (m[i].key_len == m[k].key_len && memcmp(m[i].key, m[k].key, m[i].key_len) == 0)
                return 1;
    return 0;
}

int fr_parse_int64(const member_t *m, int64_t *out) {
    if (m == NULL || !(m->kind & FR_T_INTEGER) || m->value_len > 18)
        return 0;
    const char *p = m->value, *end = m->value + m->value_len;
    int negative = *p == '-';
    int64_t v = 0;
    for (p += negative; p < end; p++)
        v = v * 10 + (*p - '0');
    *out = negative ? -v : v;
    return 1;
}

int fr_string_is(const member_t *m, const char *text) {
    size_t n = strlen(text);
    return m != NULL && m->kind == FR_T_STRING && m->value_len == n + 2 &&
           memcmp(m->value + 1, text, n) == 0;
}

