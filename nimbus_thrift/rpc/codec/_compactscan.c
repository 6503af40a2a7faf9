/* Where an unframed message ends, in C: scan_message, for both protocols (bskip walks
 * binary values, cscan compact ones) without making any objects. Part of the _compact
 * extension, whose method table is in _compact.c.
 *
 * Why: the common case is a small call that arrived whole in one recv; unframed.Scanner,
 * the incremental reference, costs ~2 us a message in the selector thread, this ~0.1 us.
 * Never accepts what the Scanner refuses: any doubt (incomplete, malformed, nested past
 * SCAN_DEPTH, past the limit) is -1, and the connection runs the Scanner, which decides
 * and explains. Every minimum size the Scanner checks a count against is a true
 * minimum, so a message that ends within the limit passes all of its limit checks.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "_wirecommon.h"
#include "_compact.h"
#include "_compactread.h"

/* Below unframed.py's MAX_DEPTH on purpose: deeper messages go to the Scanner. */
#define SCAN_DEPTH 32

static int bskip(const Frame *f, Py_ssize_t *pos, int type, int depth);

static Py_ssize_t
bfixed(int type)
{
    switch (type) {
    case 2: case 3: return 1;
    case 6: return 2;
    case 8: return 4;
    case 4: case 10: return 8;
    default: return -1;
    }
}

/* One binary value of wire `type` (unframed.Scanner._binary_value and what it pushes). */
static int
bskip(const Frame *f, Py_ssize_t *pos, int type, int depth)
{
    Py_ssize_t size = bfixed(type);
    if (size > 0) {
        if (f->end - *pos < size) return -1;
        *pos += size;
        return 0;
    }
    if (depth >= SCAN_DEPTH)
        return -1;
    switch (type) {
    case T_STRING: {
        if (f->end - *pos < 4) return -1;
        int32_t n = get_i32(f->buf + *pos);
        *pos += 4;
        if (n < 0 || n > f->end - *pos) return -1;
        *pos += n;
        return 0;
    }
    case T_STRUCT:
        for (;;) {
            if (*pos >= f->end) return -1;
            int ftype = f->buf[*pos];
            if (ftype == 0) { (*pos)++; return 0; }
            if (f->end - *pos < 3) return -1;
            *pos += 3;
            if (bskip(f, pos, ftype, depth + 1) < 0) return -1;
        }
    case T_MAP: {
        if (f->end - *pos < 6) return -1;
        int k = f->buf[*pos], v = f->buf[*pos + 1];
        int32_t count = get_i32(f->buf + *pos + 2);
        *pos += 6;
        if (count < 0) return -1;
        for (int32_t i = 0; i < count; i++)
            if (bskip(f, pos, k, depth + 1) < 0 || bskip(f, pos, v, depth + 1) < 0)
                return -1;
        return 0;
    }
    case T_SET: case T_LIST: {
        if (f->end - *pos < 5) return -1;
        int e = f->buf[*pos];
        int32_t count = get_i32(f->buf + *pos + 1);
        *pos += 5;
        if (count < 0) return -1;
        Py_ssize_t fixed = bfixed(e);
        if (fixed > 0) {
            if ((int64_t)count * fixed > (int64_t)(f->end - *pos)) return -1;
            *pos += (Py_ssize_t)count * fixed;
            return 0;
        }
        for (int32_t i = 0; i < count; i++)
            if (bskip(f, pos, e, depth + 1) < 0) return -1;
        return 0;
    }
    default:
        return -1;
    }
}

/* One compact value (unframed.Scanner._compact_value); `element`: in a container. */
static int
cscan(const Frame *f, Py_ssize_t *pos, int ctype, int element, int depth)
{
    uint64_t n;
    switch (ctype) {
    case C_TRUE: case C_FALSE: case C_BYTE:
        if (*pos >= f->end) return -1;
        (*pos)++;
        return 0;
    case C_I16: case C_I32: case C_I64: {
        int wide;
        return varint_wide(f, pos, 10, &n, &wide);
    }
    case C_DOUBLE:
        if (f->end - *pos < 8) return -1;
        *pos += 8;
        return 0;
    case C_BINARY:
        if (varint(f, pos, 5, &n) < 0 || n > (uint64_t)(f->end - *pos)) return -1;
        *pos += (Py_ssize_t)n;
        return 0;
    default:
        break;
    }
    if (depth >= SCAN_DEPTH)
        return -1;
    if (ctype == C_STRUCT) {
        for (;;) {
            if (*pos >= f->end) return -1;
            unsigned char head = f->buf[(*pos)++];
            if (head == C_STOP) return 0;
            int t = head & 0x0F;
            if ((head >> 4) == 0) {
                int64_t fid;
                if (zigzag(f, pos, 16, &fid) < 0) return -1;
            }
            if (t == C_TRUE || t == C_FALSE) continue;
            if (cscan(f, pos, t, 0, depth + 1) < 0) return -1;
        }
    }
    if (ctype == C_LIST || ctype == C_SET) {
        int e;
        uint64_t count;
        if (list_head(f, pos, &e, &count) < 0) return -1;
        for (uint64_t i = 0; i < count; i++)
            if (cscan(f, pos, e, 1, depth + 1) < 0) return -1;
        return 0;
    }
    if (ctype == C_MAP) {
        int k, v;
        uint64_t count;
        if (map_head(f, pos, &k, &v, &count) < 0) return -1;
        for (uint64_t i = 0; i < count; i++)
            if (cscan(f, pos, k, 1, depth + 1) < 0 || cscan(f, pos, v, 1, depth + 1) < 0)
                return -1;
        return 0;
    }
    (void)element;
    return -1;
}

const char compact_scan_message_doc[] = PyDoc_STR(
"scan_message(buf, compact, limit) -> int\n\n"
"The length of the unframed message at the start of `buf` (binary, or compact when\n"
"`compact`) if all of it is there and within `limit`; -1 otherwise (ask\n"
"unframed.Scanner, which decides).");

PyObject *
compact_scan_message(PyObject *self, PyObject *args)
{
    PyObject *data;
    int is_compact;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "Opn:scan_message", &data, &is_compact, &limit))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Frame f = {(const unsigned char *)view.buf, view.len, 0};
    Py_ssize_t pos = -1;
    if (is_compact) {
        uint64_t seqid, size;
        Py_ssize_t p = 2;
        if (f.end >= 2 && f.buf[0] == 0x82 && (f.buf[1] & 0x1F) == 1 &&
                varint(&f, &p, 5, &seqid) == 0 && varint(&f, &p, 5, &size) == 0 &&
                size <= (uint64_t)(f.end - p)) {
            p += (Py_ssize_t)size;
            if (cscan(&f, &p, C_STRUCT, 0, 0) == 0)
                pos = p;
        }
    } else if (f.end >= 8 && ((uint32_t)get_i32(f.buf) & 0xFFFF0000u) == 0x80010000u) {
        int32_t size = get_i32(f.buf + 4);
        Py_ssize_t p = 8;
        if (size >= 0 && (Py_ssize_t)size + 4 <= f.end - p) {
            p += (Py_ssize_t)size + 4;
            if (bskip(&f, &p, T_STRUCT, 0) == 0)
                pos = p;
        }
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(pos >= 0 && pos <= limit ? pos : -1);
}
