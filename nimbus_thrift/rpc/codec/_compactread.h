/* Reading compact's variable-length pieces (varints, zigzag integers, list and map
 * heads): what the compact decoder (_compact.c) and the unframed message scan
 * (_compactscan.c) both read, with the same limits as compact.py.
 *
 * Both files use all of it. The functions keep the linkage they had when the two were
 * one file (`static`, inlining left to the compiler as before).
 */
#ifndef NIMBUS_THRIFT_COMPACTREAD_H
#define NIMBUS_THRIFT_COMPACTREAD_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "_wirecommon.h"
#include "_compact.h"

/* An unsigned varint of at most max_bytes at *pos; -1 on truncation or overlength.
 * *wide (if given) says the value has bits past 64 (a 10th byte over 1): compact.py
 * holds those in a Python int, refuses them as an i64 and skips them in an unknown
 * field, so the callers decide. */
static int
varint_wide(const Frame *f, Py_ssize_t *pos, int max_bytes, uint64_t *out, int *wide)
{
    uint64_t result = 0;
    int shift = 0;
    Py_ssize_t p = *pos, start = p;
    for (;;) {
        if (p >= f->end)
            return -1;
        unsigned char byte = f->buf[p++];
        if (shift < 64)
            result |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            int over = shift == 63 && byte > 1;
            if (wide != NULL)
                *wide = over;
            else if (over)
                return -1;
            *pos = p;
            *out = result;
            return 0;
        }
        shift += 7;
        if (p - start >= max_bytes)
            return -1;
    }
}

/* An unsigned varint of at most max_bytes with no bits past 64. */
static int
varint(const Frame *f, Py_ssize_t *pos, int max_bytes, uint64_t *out)
{
    return varint_wide(f, pos, max_bytes, out, NULL);
}

/* A zigzag integer of `bits` (16, 32 or 64): at most 5 bytes below 64 bits, 10 at 64,
 * and no bits past the width (compact._read_zigzag). */
static int
zigzag(const Frame *f, Py_ssize_t *pos, int bits, int64_t *out)
{
    uint64_t raw;
    if (varint(f, pos, bits <= 32 ? 5 : 10, &raw) < 0)
        return -1;
    if (bits < 64 && (raw >> bits) != 0)
        return -1;
    *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
    return 0;
}

/* (element type, count) of a list or set at *pos. */
static int
list_head(const Frame *f, Py_ssize_t *pos, int *etype, uint64_t *count)
{
    if (*pos >= f->end)
        return -1;
    unsigned char head = f->buf[(*pos)++];
    *etype = head & 0x0F;
    *count = head >> 4;
    if (*count == 15 && varint(f, pos, 5, count) < 0)
        return -1;
    return 0;
}

/* (key type, value type, count) of a map at *pos. */
static int
map_head(const Frame *f, Py_ssize_t *pos, int *ktype, int *vtype, uint64_t *count)
{
    if (varint(f, pos, 5, count) < 0)
        return -1;
    *ktype = *vtype = 0;
    if (*count == 0)
        return 0;
    if (*pos >= f->end)
        return -1;
    unsigned char types = f->buf[(*pos)++];
    *ktype = types >> 4;
    *vtype = types & 0x0F;
    return 0;
}

#endif /* NIMBUS_THRIFT_COMPACTREAD_H */
