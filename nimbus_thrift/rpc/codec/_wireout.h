/* The growable output buffer both C encoders (_wireencode.c, _compactencode.c) write a
 * reply into: it starts on the C stack and moves to the heap only when a reply
 * outgrows it, each growth checked against MAX_ENCODED before anything is allocated.
 *
 * Only the encoders include this file, and each uses all of it; the functions keep the
 * linkage they had when each codec was one file (out_grow, the slow path, stays out of
 * line; out_reserve, which runs for every value written, is inline).
 */
#ifndef NIMBUS_THRIFT_WIREOUT_H
#define NIMBUS_THRIFT_WIREOUT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

/* A frame's length is a signed i32 to most Thrift readers: a reply the C encoder would
 * make longer than that (prefix included) is left to the Python side (which then
 * raises or writes a frame nobody reads; either way it is not ours to guess). */
#define MAX_ENCODED ((Py_ssize_t)INT32_MAX)

/* Most replies fit here and leave C with one copy into the result bytes; bigger ones
 * move to the heap and double from there. */
#define STACK_OUT 1024

typedef struct {
    unsigned char *data;          /* `stack` until the first growth */
    Py_ssize_t len, cap;
    unsigned char stack[STACK_OUT];
} Out;

static void
out_init(Out *o)
{
    o->data = o->stack;
    o->len = 0;
    o->cap = STACK_OUT;
}

static void
out_free(Out *o)
{
    if (o->data != o->stack)
        PyMem_Free(o->data);
    o->data = o->stack;
}

/* out_reserve's slow path: checked against MAX_ENCODED before any allocation. */
static int
out_grow(Out *o, Py_ssize_t n)
{
    if (n < 0 || n > MAX_ENCODED - o->len)
        return -1;
    Py_ssize_t need = o->len + n, cap = o->cap;
    while (cap < need)
        cap = cap > MAX_ENCODED / 2 ? MAX_ENCODED : cap * 2;
    unsigned char *data;
    if (o->data == o->stack) {
        data = PyMem_Malloc((size_t)cap);
        if (data != NULL)
            memcpy(data, o->stack, (size_t)o->len);
    } else {
        data = PyMem_Realloc(o->data, (size_t)cap);
    }
    if (data == NULL)
        return -1;
    o->data = data;
    o->cap = cap;
    return 0;
}

/* Room for n more bytes. Inline: it runs for every value written. */
static inline int
out_reserve(Out *o, Py_ssize_t n)
{
    return n <= o->cap - o->len ? 0 : out_grow(o, n);
}

/* n bytes as they are. */
static int
put_bytes(Out *o, const void *p, Py_ssize_t n)
{
    if (out_reserve(o, n) < 0)
        return -1;
    memcpy(o->data + o->len, p, (size_t)n);
    o->len += n;
    return 0;
}

#endif /* NIMBUS_THRIFT_WIREOUT_H */
