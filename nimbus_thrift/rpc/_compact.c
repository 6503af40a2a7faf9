/* TCompactProtocol decoding and encoding in C: the fast paths of nimbus_thrift/rpc/compact.py.
 *
 * Why: the Python codec costs 1.2 us to decode Echo.echo's args and 1.4 us to encode its
 * result, and 110 us / 160 us for a 20-supervisor ClusterSummary (scripts/bench/
 * protocol_forms.py), against 0.4 / 0.15 us and 16 / 6 us for binary in _wire.c.
 *
 * The rules are compact.py's, which stays the reference and the one that explains: on
 * any problem these functions return None and compact.py decodes (or encodes) again in
 * Python, which raises the precise error. So this code must never accept what the
 * Python codec refuses, nor write other bytes than it writes; refusing more only costs
 * speed. tests/unit/test_compact.py runs every case through both, and the compact fuzz
 * (tests/support/compact_fuzz.py) compares them on mutated input.
 *
 * The decoder charges the decoded-size budget exactly as compact.py (and the binary
 * decoders) do: a struct before it is made, a container's object, slots and scalar
 * elements before its loop, a binary by its size before, a string by its characters
 * after, a scalar field as it is set.
 *
 * Plans are binary.c_plan's (see _wire.c): [cls, fields, order, cost] with
 * fields = {fid * 256 + binary wire type: (name, kind, sub)}; a compact field type is
 * mapped to the binary wire type to look it up.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

enum { K_BOOL, K_BYTE, K_I16, K_I32, K_I64, K_DOUBLE, K_STRING, K_BINARY, K_STRUCT,
       K_LIST, K_SET, K_MAP };

/* Binary wire types (the plan's keys). */
enum { T_BOOL = 2, T_BYTE = 3, T_DOUBLE = 4, T_I16 = 6, T_I32 = 8, T_I64 = 10,
       T_STRING = 11, T_STRUCT = 12, T_MAP = 13, T_SET = 14, T_LIST = 15 };

/* Compact types. */
enum { C_STOP, C_TRUE, C_FALSE, C_BYTE, C_I16, C_I32, C_I64, C_DOUBLE, C_BINARY, C_LIST,
       C_SET, C_MAP, C_STRUCT };

#define MAX_DEPTH 64

#define COST_INT 32
#define COST_DOUBLE 24
#define COST_BOOL 0
#define COST_BYTES 33
#define COST_STR_ASCII 49
#define COST_STR 80
#define COST_STR_CHAR 4
#define COST_LIST 56
#define COST_LIST_SLOT 8
#define COST_SET 216
#define COST_SET_SLOT 128
#define COST_MAP 64
#define COST_MAP_ENTRY 72

typedef struct {
    const unsigned char *buf;
    Py_ssize_t end;
    Py_ssize_t left;
} Frame;

static inline int
charge(Frame *f, int64_t cost)
{
    if (cost > (int64_t)f->left)
        return -1;
    f->left -= (Py_ssize_t)cost;
    return 0;
}

static inline int64_t
scalar_cost(int kind)
{
    switch (kind) {
    case K_BYTE: case K_I16: case K_I32: case K_I64: return COST_INT;
    case K_DOUBLE: return COST_DOUBLE;
    default: return 0;
    }
}

/* compact.TO_COMPACT for a plan kind (K_STRING and K_BINARY are both C_BINARY). */
static int
compact_of(int kind)
{
    switch (kind) {
    case K_BOOL: return C_TRUE;
    case K_BYTE: return C_BYTE;
    case K_I16: return C_I16;
    case K_I32: return C_I32;
    case K_I64: return C_I64;
    case K_DOUBLE: return C_DOUBLE;
    case K_STRING: case K_BINARY: return C_BINARY;
    case K_STRUCT: return C_STRUCT;
    case K_LIST: return C_LIST;
    case K_SET: return C_SET;
    case K_MAP: return C_MAP;
    default: return -1;
    }
}

/* The binary wire type a compact field type stands for (-1: unknown). */
static int
wire_of(int ctype)
{
    static const int map[] = {-1, T_BOOL, T_BOOL, T_BYTE, T_I16, T_I32, T_I64, T_DOUBLE,
                              T_STRING, T_LIST, T_SET, T_MAP, T_STRUCT};
    return ctype >= 0 && ctype <= C_STRUCT ? map[ctype] : -1;
}

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

/* A zigzag integer of `bits` (16, 32 or 64): at most 5 bytes below 64 bits, 10 at 64,
 * and no bits past the width (compact._read_zigzag). */
static int
varint(const Frame *f, Py_ssize_t *pos, int max_bytes, uint64_t *out)
{
    return varint_wide(f, pos, max_bytes, out, NULL);
}

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

static Py_ssize_t
min_size(int ctype)
{
    return ctype == C_DOUBLE ? 8 : 1;
}

static int
count_fits(const Frame *f, Py_ssize_t pos, uint64_t count, Py_ssize_t per_item)
{
    return count <= (uint64_t)PY_SSIZE_T_MAX / (uint64_t)per_item &&
           (Py_ssize_t)count * per_item <= f->end - pos;
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

static int skip(const Frame *f, Py_ssize_t *pos, int ctype, int depth);

static int
skip_element(const Frame *f, Py_ssize_t *pos, int ctype, int depth)
{
    if (ctype == C_TRUE || ctype == C_FALSE) {
        if (*pos >= f->end)
            return -1;
        (*pos)++;
        return 0;
    }
    return skip(f, pos, ctype, depth);
}

/* compact.skip. */
static int
skip(const Frame *f, Py_ssize_t *pos, int ctype, int depth)
{
    uint64_t n;
    switch (ctype) {
    case C_TRUE: case C_FALSE:
        return 0;
    case C_BYTE:
        if (*pos >= f->end) return -1;
        (*pos)++;
        return 0;
    case C_I16: case C_I32: case C_I64: {
        int wide;
        return varint_wide(f, pos, 10, &n, &wide);     /* any 10-byte value: skipped */
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
    if (depth >= MAX_DEPTH)
        return -1;
    if (ctype == C_STRUCT) {
        for (;;) {
            if (*pos >= f->end) return -1;
            unsigned char head = f->buf[(*pos)++];
            if (head == C_STOP) return 0;
            if ((head >> 4) == 0) {
                int64_t fid;
                if (zigzag(f, pos, 16, &fid) < 0) return -1;
            }
            if (skip(f, pos, head & 0x0F, depth + 1) < 0) return -1;
        }
    }
    if (ctype == C_LIST || ctype == C_SET) {
        int etype;
        uint64_t count;
        if (list_head(f, pos, &etype, &count) < 0 ||
                !count_fits(f, *pos, count, min_size(etype)))
            return -1;
        for (uint64_t i = 0; i < count; i++)
            if (skip_element(f, pos, etype, depth + 1) < 0) return -1;
        return 0;
    }
    if (ctype == C_MAP) {
        int kt, vt;
        uint64_t count;
        if (map_head(f, pos, &kt, &vt, &count) < 0 ||
                !count_fits(f, *pos, count, min_size(kt) + min_size(vt)))
            return -1;
        for (uint64_t i = 0; i < count; i++)
            if (skip_element(f, pos, kt, depth + 1) < 0 ||
                    skip_element(f, pos, vt, depth + 1) < 0)
                return -1;
        return 0;
    }
    return -1;
}

static int
element_of(PyObject *t, int *kind, PyObject **sub)
{
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 3)
        return -1;
    *kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(t, 0));
    *sub = PyTuple_GET_ITEM(t, 1);
    return PyErr_Occurred() ? -1 : 0;
}

/* compact._element_matches */
static int
element_matches(int got, int kind)
{
    if (kind == K_BOOL)
        return got == C_TRUE || got == C_FALSE;
    return got == compact_of(kind);
}

static PyObject *read_struct(Frame *f, Py_ssize_t *pos, PyObject *plan, int depth);

static PyObject *
read_value(Frame *f, Py_ssize_t *pos, int kind, PyObject *sub, int depth)
{
    const unsigned char *b = f->buf;
    int64_t v;
    switch (kind) {
    case K_BOOL:
        if (*pos >= f->end) return NULL;
        return PyBool_FromLong(b[(*pos)++] == C_TRUE);
    case K_BYTE:
        if (*pos >= f->end) return NULL;
        return PyLong_FromLong((signed char)b[(*pos)++]);
    case K_I16:
        if (zigzag(f, pos, 16, &v) < 0) return NULL;
        return PyLong_FromLongLong(v);
    case K_I32:
        if (zigzag(f, pos, 32, &v) < 0) return NULL;
        return PyLong_FromLongLong(v);
    case K_I64:
        if (zigzag(f, pos, 64, &v) < 0) return NULL;
        return PyLong_FromLongLong(v);
    case K_DOUBLE: {
        if (f->end - *pos < 8) return NULL;
        double d;
        unsigned char raw[8];
        for (int i = 0; i < 8; i++)            /* little-endian on the wire */
            raw[i] = b[*pos + i];
#if PY_BIG_ENDIAN
        for (int i = 0; i < 4; i++) { unsigned char t = raw[i]; raw[i] = raw[7 - i]; raw[7 - i] = t; }
#endif
        memcpy(&d, raw, 8);
        *pos += 8;
        return PyFloat_FromDouble(d);
    }
    case K_STRING:
    case K_BINARY: {
        uint64_t n;
        if (varint(f, pos, 5, &n) < 0 || n > (uint64_t)(f->end - *pos)) return NULL;
        Py_ssize_t p = *pos;
        *pos = p + (Py_ssize_t)n;
        if (kind == K_BINARY) {
            if (charge(f, COST_BYTES + (int64_t)n) < 0) return NULL;
            return PyBytes_FromStringAndSize((const char *)b + p, (Py_ssize_t)n);
        }
        PyObject *s = PyUnicode_DecodeUTF8((const char *)b + p, (Py_ssize_t)n, "strict");
        if (s != NULL) {
            int64_t len = (int64_t)PyUnicode_GET_LENGTH(s);
            int64_t cost = PyUnicode_IS_ASCII(s) ? COST_STR_ASCII + len
                                                 : COST_STR + COST_STR_CHAR * len;
            if (charge(f, cost) < 0) { Py_DECREF(s); return NULL; }
        }
        return s;
    }
    case K_STRUCT:
        return read_struct(f, pos, sub, depth);
    case K_LIST:
    case K_SET: {
        int ekind, got;
        PyObject *esub;
        uint64_t count;
        if (depth >= MAX_DEPTH || element_of(sub, &ekind, &esub) < 0 ||
                list_head(f, pos, &got, &count) < 0)
            return NULL;
        if ((count && !element_matches(got, ekind)) ||
                !count_fits(f, *pos, count, ekind == K_DOUBLE ? 8 : 1))
            return NULL;
        int64_t per = (kind == K_LIST ? COST_LIST_SLOT : COST_SET_SLOT) + scalar_cost(ekind);
        if (charge(f, (kind == K_LIST ? COST_LIST : COST_SET) + (int64_t)count * per) < 0)
            return NULL;
        PyObject *out = kind == K_LIST ? PyList_New((Py_ssize_t)count) : PySet_New(NULL);
        if (out == NULL) return NULL;
        for (uint64_t i = 0; i < count; i++) {
            PyObject *v = read_value(f, pos, ekind, esub, depth + 1);
            if (v == NULL) { Py_DECREF(out); return NULL; }
            if (kind == K_LIST) {
                PyList_SET_ITEM(out, (Py_ssize_t)i, v);
            } else {
                int rc = PySet_Add(out, v);
                Py_DECREF(v);
                if (rc < 0) { Py_DECREF(out); return NULL; }
            }
        }
        return out;
    }
    case K_MAP: {
        if (depth >= MAX_DEPTH || !PyTuple_Check(sub) || PyTuple_GET_SIZE(sub) != 2)
            return NULL;
        int kkind, vkind, gotk, gotv;
        PyObject *ksub, *vsub;
        uint64_t count;
        if (element_of(PyTuple_GET_ITEM(sub, 0), &kkind, &ksub) < 0 ||
                element_of(PyTuple_GET_ITEM(sub, 1), &vkind, &vsub) < 0 ||
                map_head(f, pos, &gotk, &gotv, &count) < 0)
            return NULL;
        if ((count && !(element_matches(gotk, kkind) && element_matches(gotv, vkind))) ||
                !count_fits(f, *pos, count, (kkind == K_DOUBLE ? 8 : 1) +
                                            (vkind == K_DOUBLE ? 8 : 1)))
            return NULL;
        int64_t per = COST_MAP_ENTRY + scalar_cost(kkind) + scalar_cost(vkind);
        if (charge(f, COST_MAP + (int64_t)count * per) < 0)
            return NULL;
        PyObject *out = PyDict_New();
        if (out == NULL) return NULL;
        for (uint64_t i = 0; i < count; i++) {
            PyObject *k = read_value(f, pos, kkind, ksub, depth + 1);
            if (k == NULL) { Py_DECREF(out); return NULL; }
            PyObject *v = read_value(f, pos, vkind, vsub, depth + 1);
            if (v == NULL) { Py_DECREF(k); Py_DECREF(out); return NULL; }
            int rc = PyDict_SetItem(out, k, v);
            Py_DECREF(k);
            Py_DECREF(v);
            if (rc < 0) { Py_DECREF(out); return NULL; }
        }
        return out;
    }
    default:
        return NULL;
    }
}

static PyObject *
read_struct(Frame *f, Py_ssize_t *pos, PyObject *plan, int depth)
{
    if (depth >= MAX_DEPTH || !PyList_Check(plan) || PyList_GET_SIZE(plan) < 4)
        return NULL;
    PyObject *cls = PyList_GET_ITEM(plan, 0);
    PyObject *fields = PyList_GET_ITEM(plan, 1);
    Py_ssize_t cost = PyLong_AsSsize_t(PyList_GET_ITEM(plan, 3));
    if (cost < 0 || charge(f, cost) < 0)
        return NULL;
    PyObject *obj = PyObject_CallNoArgs(cls);
    if (obj == NULL)
        return NULL;
    long last = 0;
    for (;;) {
        if (*pos >= f->end)
            goto fail;
        unsigned char head = f->buf[(*pos)++];
        if (head == C_STOP)
            return obj;
        int ctype = head & 0x0F;
        long fid;
        if (head >> 4) {
            fid = last + (head >> 4);
        } else {
            int64_t id;
            if (zigzag(f, pos, 16, &id) < 0)
                goto fail;
            fid = (long)id;
        }
        last = fid;
        int wire = wire_of(ctype);
        PyObject *hit = NULL;
        if (wire >= 0) {
            PyObject *key = PyLong_FromLong(fid * 256 + wire);
            if (key == NULL)
                goto fail;
            hit = PyDict_GetItemWithError(fields, key);   /* borrowed */
            Py_DECREF(key);
            if (hit == NULL && PyErr_Occurred())
                goto fail;
        }
        if (hit == NULL) {
            if (skip(f, pos, ctype, depth + 1) < 0)
                goto fail;
            continue;
        }
        int kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(hit, 1));
        PyObject *value;
        if (kind == K_BOOL) {
            value = PyBool_FromLong(ctype == C_TRUE);    /* the value is in the type */
        } else {
            value = read_value(f, pos, kind, PyTuple_GET_ITEM(hit, 2), depth + 1);
            if (value == NULL)
                goto fail;
        }
        if (charge(f, scalar_cost(kind)) < 0) {
            Py_DECREF(value);
            goto fail;
        }
        int rc = PyObject_SetAttr(obj, PyTuple_GET_ITEM(hit, 0), value);
        Py_DECREF(value);
        if (rc < 0)
            goto fail;
    }
fail:
    Py_DECREF(obj);
    return NULL;
}

PyDoc_STRVAR(decode_struct_doc,
"decode_struct(plan, buf, pos, end, budget) -> (obj, end_pos) | None\n\n"
"Decode one compact struct as compact.decode_struct does; None on any problem.");

static PyObject *
compact_decode_struct(PyObject *self, PyObject *args)
{
    PyObject *plan, *data;
    Py_ssize_t pos, end, budget = PY_SSIZE_T_MAX;
    if (!PyArg_ParseTuple(args, "O!Onn|n:decode_struct", &PyList_Type, &plan, &data, &pos,
                          &end, &budget))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (end > view.len || pos < 0 || pos > end) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    Frame f = {(const unsigned char *)view.buf, end, budget};
    PyObject *obj = read_struct(&f, &pos, plan, 0);
    PyBuffer_Release(&view);
    if (obj == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(Nn)", obj, pos);
}

/* ------------------------------------------------------------------------ encoding
 *
 * What compact._Writer writes, byte for byte; None (then Python encodes, or raises) on
 * any value it might take differently: only exact types here (bool and int for bool and
 * integers, float or exact int for double, exact str/bytes/bytearray for strings,
 * exact list/tuple/set/frozenset, exact dict, the plan's own class for structs).
 */

#define MAX_ENCODED ((Py_ssize_t)INT32_MAX)

typedef struct {
    unsigned char *data;
    Py_ssize_t len, cap;
    unsigned char stack[1024];
} Out;

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

static inline int
reserve(Out *o, Py_ssize_t n)
{
    return n <= o->cap - o->len ? 0 : out_grow(o, n);
}

static inline int
put_byte(Out *o, unsigned char b)
{
    if (reserve(o, 1) < 0)
        return -1;
    o->data[o->len++] = b;
    return 0;
}

static int
put_varint(Out *o, uint64_t n)
{
    if (reserve(o, 10) < 0)
        return -1;
    while (n > 0x7F) {
        o->data[o->len++] = (unsigned char)((n & 0x7F) | 0x80);
        n >>= 7;
    }
    o->data[o->len++] = (unsigned char)n;
    return 0;
}

static int
put_sized(Out *o, const char *p, Py_ssize_t n)
{
    if (n > 0x7FFFFFFF || put_varint(o, (uint64_t)n) < 0 || reserve(o, n) < 0)
        return -1;
    memcpy(o->data + o->len, p, (size_t)n);
    o->len += n;
    return 0;
}

/* A zigzag integer of `bits`: exact ints (and bools) in range only. */
static int
put_zigzag(Out *o, PyObject *v, int bits)
{
    if (!PyLong_Check(v))
        return -1;
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred()))
        return -1;
    long long lo = bits == 64 ? INT64_MIN : -(1LL << (bits - 1));
    long long hi = bits == 64 ? INT64_MAX : (1LL << (bits - 1)) - 1;
    if (x < lo || x > hi)
        return -1;
    uint64_t zz = ((uint64_t)x << 1) ^ (uint64_t)(x >> 63);
    if (bits < 64)
        zz &= (1ULL << bits) - 1;
    return put_varint(o, zz);
}

/* bool and exact int, whose truth runs no Python code; -1 for anything else. */
static int
truth(PyObject *v)
{
    if (PyBool_Check(v))
        return v == Py_True;
    if (PyLong_CheckExact(v))
        return PyObject_IsTrue(v);
    return -1;
}

static int write_struct(Out *o, PyObject *obj, PyObject *plan, int depth);

static int
put_string(Out *o, PyObject *v)
{
    if (PyUnicode_CheckExact(v)) {
        Py_ssize_t n;
        const char *p = PyUnicode_AsUTF8AndSize(v, &n);
        return p == NULL ? -1 : put_sized(o, p, n);
    }
    if (PyBytes_CheckExact(v))
        return put_sized(o, PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v));
    if (PyByteArray_CheckExact(v))
        return put_sized(o, PyByteArray_AS_STRING(v), PyByteArray_GET_SIZE(v));
    return -1;
}

static int
write_value(Out *o, PyObject *v, int kind, PyObject *sub, int depth)
{
    switch (kind) {
    case K_BOOL: {
        int t = truth(v);
        return t < 0 ? -1 : put_byte(o, t ? C_TRUE : C_FALSE);
    }
    case K_BYTE: {
        if (!PyLong_Check(v))
            return -1;
        long x = PyLong_AsLong(v);
        if ((x == -1 && PyErr_Occurred()) || x < -128 || x > 127)
            return -1;
        return put_byte(o, (unsigned char)(x & 0xFF));
    }
    case K_I16: return put_zigzag(o, v, 16);
    case K_I32: return put_zigzag(o, v, 32);
    case K_I64: return put_zigzag(o, v, 64);
    case K_DOUBLE: {
        double d;
        if (PyFloat_Check(v))
            d = PyFloat_AS_DOUBLE(v);
        else if (PyLong_CheckExact(v))
            d = PyLong_AsDouble(v);
        else
            return -1;
        if (d == -1.0 && PyErr_Occurred())
            return -1;
        unsigned char raw[8];
        memcpy(raw, &d, 8);
#if PY_BIG_ENDIAN
        for (int i = 0; i < 4; i++) { unsigned char t = raw[i]; raw[i] = raw[7 - i]; raw[7 - i] = t; }
#endif
        if (reserve(o, 8) < 0)
            return -1;
        memcpy(o->data + o->len, raw, 8);
        o->len += 8;
        return 0;
    }
    case K_STRING:
    case K_BINARY:
        return put_string(o, v);
    case K_STRUCT:
        return write_struct(o, v, sub, depth + 1);
    case K_LIST:
    case K_SET: {
        int ekind;
        PyObject *esub;
        if (depth >= MAX_DEPTH || element_of(sub, &ekind, &esub) < 0)
            return -1;
        int seq = PyList_CheckExact(v) || PyTuple_CheckExact(v);
        if (!seq && !PyAnySet_CheckExact(v))
            return -1;
        Py_ssize_t n = PyObject_Length(v);
        int ctype = compact_of(ekind);
        if (n < 0 || ctype < 0)
            return -1;
        if (n < 15) {
            if (put_byte(o, (unsigned char)(n << 4 | ctype)) < 0) return -1;
        } else if (put_byte(o, (unsigned char)(0xF0 | ctype)) < 0 ||
                   put_varint(o, (uint64_t)n) < 0) {
            return -1;
        }
        Py_ssize_t written = 0;
        if (seq) {
            for (; written < n && written < PySequence_Fast_GET_SIZE(v); written++) {
                PyObject *item = PySequence_Fast_GET_ITEM(v, written);
                Py_INCREF(item);
                int rc = write_value(o, item, ekind, esub, depth + 1);
                Py_DECREF(item);
                if (rc < 0) return -1;
            }
        } else {
            PyObject *it = PyObject_GetIter(v), *item;
            if (it == NULL) return -1;
            int rc = 0;
            while (rc == 0 && (item = PyIter_Next(it)) != NULL) {
                rc = write_value(o, item, ekind, esub, depth + 1);
                Py_DECREF(item);
                written++;
            }
            Py_DECREF(it);
            if (rc < 0 || PyErr_Occurred()) return -1;
        }
        return written == n ? 0 : -1;
    }
    case K_MAP: {
        int kkind, vkind;
        PyObject *ksub, *vsub;
        if (depth >= MAX_DEPTH || !PyTuple_Check(sub) || PyTuple_GET_SIZE(sub) != 2 ||
                element_of(PyTuple_GET_ITEM(sub, 0), &kkind, &ksub) < 0 ||
                element_of(PyTuple_GET_ITEM(sub, 1), &vkind, &vsub) < 0 ||
                !PyDict_CheckExact(v))
            return -1;
        Py_ssize_t n = PyDict_GET_SIZE(v);
        int kc = compact_of(kkind), vc = compact_of(vkind);
        if (kc < 0 || vc < 0 || put_varint(o, (uint64_t)n) < 0)
            return -1;
        if (n && put_byte(o, (unsigned char)(kc << 4 | vc)) < 0)
            return -1;
        Py_ssize_t i = 0, written = 0;
        PyObject *key, *value;
        while (PyDict_Next(v, &i, &key, &value)) {
            Py_INCREF(key);
            Py_INCREF(value);
            int rc = write_value(o, key, kkind, ksub, depth + 1);
            if (rc == 0)
                rc = write_value(o, value, vkind, vsub, depth + 1);
            Py_DECREF(key);
            Py_DECREF(value);
            if (rc < 0) return -1;
            written++;
        }
        return written == n ? 0 : -1;
    }
    default:
        return -1;
    }
}

static int
field_value(PyObject *obj, PyObject *name, PyObject **value)
{
#if PY_VERSION_HEX >= 0x030D0000
    return PyObject_GetOptionalAttr(obj, name, value);
#else
    return _PyObject_LookupAttr(obj, name, value);
#endif
}

static int
write_struct(Out *o, PyObject *obj, PyObject *plan, int depth)
{
    if (depth >= MAX_DEPTH || !PyList_Check(plan) || PyList_GET_SIZE(plan) < 3 ||
            (PyObject *)Py_TYPE(obj) != PyList_GET_ITEM(plan, 0))
        return -1;
    PyObject *order = PyList_GET_ITEM(plan, 2);
    if (!PyTuple_Check(order))
        return -1;
    long last = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(order); i++) {
        PyObject *field = PyTuple_GET_ITEM(order, i), *value;
        if (!PyTuple_Check(field) || PyTuple_GET_SIZE(field) != 5)
            return -1;
        int got = field_value(obj, PyTuple_GET_ITEM(field, 0), &value);
        if (got < 0)
            return -1;
        if (got == 0 || value == Py_None) {
            Py_XDECREF(value);
            continue;
        }
        int kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(field, 1));
        long fid = PyLong_AsLong(PyTuple_GET_ITEM(field, 3));
        int ctype = compact_of(kind);
        int rc = -1;
        if (PyErr_Occurred() || ctype < 0 || fid < -32768 || fid > 32767)
            goto done;
        if (kind == K_BOOL) {
            int t = truth(value);
            if (t < 0)
                goto done;
            ctype = t ? C_TRUE : C_FALSE;
        }
        long delta = fid - last;
        if (delta > 0 && delta <= 15) {
            if (put_byte(o, (unsigned char)(delta << 4 | ctype)) < 0)
                goto done;
        } else {
            uint64_t zz = (((uint64_t)(int64_t)fid << 1) ^ (uint64_t)((int64_t)fid >> 63)) & 0xFFFF;
            if (put_byte(o, (unsigned char)ctype) < 0 || put_varint(o, zz) < 0)
                goto done;
        }
        last = fid;
        rc = kind == K_BOOL ? 0 : write_value(o, value, kind, PyTuple_GET_ITEM(field, 2), depth);
    done:
        Py_DECREF(value);
        if (rc < 0)
            return -1;
    }
    return put_byte(o, C_STOP);
}

PyDoc_STRVAR(encode_message_doc,
"encode_message(name, type, seqid, payload, plan) -> bytes | None\n\n"
"A compact message as compact.encode_message writes it; None on any problem.");

static PyObject *
compact_encode_message(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "encode_message(name, type, seqid, payload, plan)");
        return NULL;
    }
    PyObject *name = args[0], *payload = args[3], *plan = args[4];
    if (!PyLong_Check(args[1]) || !PyLong_Check(args[2]) || !PyUnicode_CheckExact(name))
        Py_RETURN_NONE;
    long mtype = PyLong_AsLong(args[1]);
    long long seqid = PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred() || mtype < 0 || mtype > 7 || seqid < INT32_MIN || seqid > INT32_MAX) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    Out o;
    o.data = o.stack;
    o.len = 0;
    o.cap = (Py_ssize_t)sizeof o.stack;
    PyObject *result = NULL;
    Py_ssize_t n;
    const char *p = PyUnicode_AsUTF8AndSize(name, &n);
    if (p != NULL && put_byte(&o, 0x82) == 0 &&
            put_byte(&o, (unsigned char)(1 | ((mtype << 5) & 0xE0))) == 0 &&
            put_varint(&o, (uint64_t)(uint32_t)(int32_t)seqid) == 0 &&
            put_sized(&o, p, n) == 0 && write_struct(&o, payload, plan, 0) == 0)
        result = PyBytes_FromStringAndSize((const char *)o.data, o.len);
    if (o.data != o.stack)
        PyMem_Free(o.data);
    if (result == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return result;
}

/* ------------------------------------------------------------------------ scanning
 *
 * scan_message: where an unframed message that arrived whole ends, for the common case
 * of a small call read in one recv (unframed.Scanner, the incremental reference, costs
 * ~2 us a message in the selector thread; this ~0.1 us). Never accepts what the
 * Scanner refuses: any doubt (incomplete, malformed, nested past SCAN_DEPTH, past the
 * limit) is -1, and the connection runs the Scanner, which decides and explains. Every
 * minimum size the Scanner checks a count against is a true minimum, so a message that
 * ends within the limit passes all of its limit checks.
 */

/* Below unframed.py's MAX_DEPTH on purpose: deeper messages go to the Scanner. */
#define SCAN_DEPTH 32

static int bskip(const Frame *f, Py_ssize_t *pos, int type, int depth);

static int32_t
be32(const unsigned char *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
                     ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

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
        int32_t n = be32(f->buf + *pos);
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
        int32_t count = be32(f->buf + *pos + 2);
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
        int32_t count = be32(f->buf + *pos + 1);
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

PyDoc_STRVAR(scan_message_doc,
"scan_message(buf, compact, limit) -> int\n\n"
"The length of the unframed message at the start of `buf` (binary, or compact when\n"
"`compact`) if all of it is there and within `limit`; -1 otherwise (ask\n"
"unframed.Scanner, which decides).");

static PyObject *
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
    } else if (f.end >= 8 && ((uint32_t)be32(f.buf) & 0xFFFF0000u) == 0x80010000u) {
        int32_t size = be32(f.buf + 4);
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

static PyMethodDef compact_methods[] = {
    {"scan_message", compact_scan_message, METH_VARARGS, scan_message_doc},
    {"decode_struct", compact_decode_struct, METH_VARARGS, decode_struct_doc},
    {"encode_message", (PyCFunction)(void (*)(void))compact_encode_message, METH_FASTCALL,
     encode_message_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef compact_module = {
    PyModuleDef_HEAD_INIT, "nimbus_thrift.rpc._compact",
    "TCompactProtocol decoding and encoding fast paths; compact.py has the errors.", -1,
    compact_methods,
};

PyMODINIT_FUNC
PyInit__compact(void)
{
    PyObject *m = PyModule_Create(&compact_module);
    if (m != NULL && PyModule_AddIntConstant(m, "MAX_DEPTH", MAX_DEPTH) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
