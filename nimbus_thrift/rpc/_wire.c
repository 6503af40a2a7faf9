/* TBinaryProtocol decoding and encoding in C: the fast paths of nimbus_thrift/rpc/binary.py.
 *
 * Why: the Python decoder costs about 2 us per small call (message header plus
 * arguments), a seventh of a call's whole cost on one core. This file does the same
 * walk over the frame, with the same bounds, count and nesting checks, but it says
 * nothing about what went wrong: on any problem it returns None and binary.py decodes
 * the frame again in Python, which raises the precise DecodeError. So the C code never
 * accepts what the Python decoder refuses (tests/test_binary.py runs every case through
 * both, plus a differential fuzz), and every error message lives in one place.
 *
 * The encoding fast path (replies) is at the end of the file; it works the same way.
 *
 * The decoder also charges every object it makes against the frame's decoded-size
 * budget (rpc/decoded.py has the costs and why; binary.py charges the same amounts at
 * the same objects, so the two still agree on every frame and budget): a container's
 * object, slots and scalar elements in one step before it is made, a struct's object
 * before it is made, a string or binary by its size, a scalar field as it is set. Each
 * charge is a compare and a subtraction.
 *
 * A struct's "plan" is built once per class in binary.py (c_plan):
 *     plan   = [cls, fields, order, cost]   (a list, so recursive structs can share it;
 *              cost: what one instance is charged, binary.struct_cost)
 *     fields = {fid * 256 + wire_type: (attribute name, kind, sub)}   (decoding)
 *     order  = ((attribute name, kind, sub, fid, wire_type), ...)      (encoding, in
 *              thrift_spec's order)
 *     kind   = one of the K_* codes below; sub = the struct plan (K_STRUCT), the element
 *              (kind, sub, wire) (K_LIST, K_SET), or ((k kind, k sub, k wire),
 *              (v kind, v sub, v wire)) (K_MAP)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

enum { K_BOOL, K_BYTE, K_I16, K_I32, K_I64, K_DOUBLE, K_STRING, K_BINARY, K_STRUCT,
       K_LIST, K_SET, K_MAP };

/* Thrift wire types. */
enum { T_STOP = 0, T_BOOL = 2, T_BYTE = 3, T_DOUBLE = 4, T_I16 = 6, T_I32 = 8,
       T_I64 = 10, T_STRING = 11, T_STRUCT = 12, T_MAP = 13, T_SET = 14, T_LIST = 15 };

/* binary.MAX_DEPTH; checked equal at import by binary.py. */
#define MAX_DEPTH 64

/* decoded.COSTS, in its order; exported as COSTS and checked equal at import. */
#define COST_INT 32
#define COST_DOUBLE 24
#define COST_BOOL 0
#define COST_BYTES 33
#define COST_STR_ASCII 49
#define COST_STR 80
#define COST_STR_CHAR 4
#define COST_STRUCT 80
#define COST_STRUCT_FIELD 8
#define COST_LIST 56
#define COST_LIST_SLOT 8
#define COST_SET 216
#define COST_SET_SLOT 128
#define COST_MAP 64
#define COST_MAP_ENTRY 72

typedef struct {
    const unsigned char *buf;
    Py_ssize_t end;
    Py_ssize_t left;      /* the decoded-size budget still unspent */
} Frame;

/* Spend `cost` of the budget; -1 (nothing spent) when it is not there. */
static inline int
charge(Frame *f, int64_t cost)
{
    if (cost > (int64_t)f->left)
        return -1;
    f->left -= (Py_ssize_t)cost;
    return 0;
}

/* What a scalar of `kind` is charged by what holds it (decoded._SCALAR_COST). */
static inline int64_t
scalar_cost(int kind)
{
    switch (kind) {
    case K_BYTE: case K_I16: case K_I32: case K_I64: return COST_INT;
    case K_DOUBLE: return COST_DOUBLE;
    case K_BOOL: return COST_BOOL;
    default: return 0;   /* strings, binaries, structs, containers charge themselves */
    }
}

/* decoded.string_cost: exact for ASCII, 4 bytes a character otherwise. */
static inline int64_t
string_cost(PyObject *s)
{
    int64_t n = (int64_t)PyUnicode_GET_LENGTH(s);
    return PyUnicode_IS_ASCII(s) ? COST_STR_ASCII + n : COST_STR + COST_STR_CHAR * n;
}

/* Every helper returns NULL (values) or -1 (offsets) on a problem. A Python exception
 * may or may not be set; the entry points clear it and return None either way. */

static int32_t
get_i32(const unsigned char *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
                     ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

static int64_t
get_i64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return (int64_t)v;
}

static int
fits(const Frame *f, Py_ssize_t pos, Py_ssize_t n)
{
    return n >= 0 && pos >= 0 && pos <= f->end && n <= f->end - pos;
}

/* Smallest encoding of one value of a wire type (binary.py's _MIN_SIZE; 1 if unknown). */
static Py_ssize_t
min_size(int wire)
{
    switch (wire) {
    case T_BOOL: case T_BYTE: return 1;
    case T_I16: return 2;
    case T_I32: return 4;
    case T_I64: case T_DOUBLE: return 8;
    case T_STRING: return 4;
    case T_STRUCT: return 1;
    case T_MAP: return 6;
    case T_SET: case T_LIST: return 5;
    default: return 1;
    }
}

static int
count_fits(const Frame *f, Py_ssize_t pos, int32_t count, Py_ssize_t per_item)
{
    return count >= 0 && (Py_ssize_t)count * per_item <= f->end - pos;
}

static Py_ssize_t
skip(const Frame *f, Py_ssize_t pos, int wire, int depth)
{
    switch (wire) {
    case T_BOOL: case T_BYTE: case T_I16: case T_I32: case T_I64: case T_DOUBLE: {
        Py_ssize_t n = min_size(wire);
        return fits(f, pos, n) ? pos + n : -1;
    }
    case T_STRING: {
        if (!fits(f, pos, 4))
            return -1;
        int32_t n = get_i32(f->buf + pos);
        return fits(f, pos + 4, n) ? pos + 4 + n : -1;
    }
    default:
        break;
    }
    if (depth >= MAX_DEPTH)
        return -1;
    if (wire == T_STRUCT) {
        for (;;) {
            if (!fits(f, pos, 1))
                return -1;
            int ftype = f->buf[pos];
            if (ftype == T_STOP)
                return pos + 1;
            if (!fits(f, pos, 3))
                return -1;
            pos = skip(f, pos + 3, ftype, depth + 1);
            if (pos < 0)
                return -1;
        }
    }
    if (wire == T_MAP) {
        if (!fits(f, pos, 6))
            return -1;
        int k = f->buf[pos], v = f->buf[pos + 1];
        int32_t count = get_i32(f->buf + pos + 2);
        pos += 6;
        if (!count_fits(f, pos, count, min_size(k) + min_size(v)))
            return -1;
        for (int32_t i = 0; i < count; i++) {
            if ((pos = skip(f, pos, k, depth + 1)) < 0 || (pos = skip(f, pos, v, depth + 1)) < 0)
                return -1;
        }
        return pos;
    }
    if (wire == T_LIST || wire == T_SET) {
        if (!fits(f, pos, 5))
            return -1;
        int e = f->buf[pos];
        int32_t count = get_i32(f->buf + pos + 1);
        pos += 5;
        if (!count_fits(f, pos, count, min_size(e)))
            return -1;
        for (int32_t i = 0; i < count; i++) {
            if ((pos = skip(f, pos, e, depth + 1)) < 0)
                return -1;
        }
        return pos;
    }
    return -1;   /* unknown wire type */
}

static PyObject *read_struct(Frame *f, Py_ssize_t *pos, PyObject *plan, int depth);

/* One value of `kind`; `sub` as in the plan. Advances *pos. Charges the value, except
 * a scalar (its holder does). */
static PyObject *
read_value(Frame *f, Py_ssize_t *pos, int kind, PyObject *sub, int depth)
{
    Py_ssize_t p = *pos;
    const unsigned char *b = f->buf;
    switch (kind) {
    case K_BOOL:
        if (!fits(f, p, 1)) return NULL;
        *pos = p + 1;
        return PyBool_FromLong(b[p] != 0);
    case K_BYTE:
        if (!fits(f, p, 1)) return NULL;
        *pos = p + 1;
        return PyLong_FromLong((signed char)b[p]);
    case K_I16:
        if (!fits(f, p, 2)) return NULL;
        *pos = p + 2;
        return PyLong_FromLong((int16_t)(((unsigned)b[p] << 8) | b[p + 1]));
    case K_I32:
        if (!fits(f, p, 4)) return NULL;
        *pos = p + 4;
        return PyLong_FromLong(get_i32(b + p));
    case K_I64:
        if (!fits(f, p, 8)) return NULL;
        *pos = p + 8;
        return PyLong_FromLongLong(get_i64(b + p));
    case K_DOUBLE: {
        if (!fits(f, p, 8)) return NULL;
        uint64_t bits = (uint64_t)get_i64(b + p);
        double d;
        memcpy(&d, &bits, sizeof d);
        *pos = p + 8;
        return PyFloat_FromDouble(d);
    }
    case K_STRING:
    case K_BINARY: {
        if (!fits(f, p, 4)) return NULL;
        int32_t n = get_i32(b + p);
        if (!fits(f, p + 4, n)) return NULL;
        *pos = p + 4 + n;
        if (kind == K_BINARY) {
            if (charge(f, COST_BYTES + (int64_t)n) < 0) return NULL;
            return PyBytes_FromStringAndSize((const char *)b + p + 4, n);
        }
        /* Charged once made: its size depends on its characters (at most 4n bytes). */
        PyObject *s = PyUnicode_DecodeUTF8((const char *)b + p + 4, n, "strict");
        if (s != NULL && charge(f, string_cost(s)) < 0) {
            Py_DECREF(s);
            return NULL;
        }
        return s;
    }
    case K_STRUCT:
        return read_struct(f, pos, sub, depth);
    case K_LIST:
    case K_SET: {
        if (depth >= MAX_DEPTH || !fits(f, p, 5)) return NULL;
        /* sub = (element kind, element sub, element wire type) */
        int ekind = (int)PyLong_AsLong(PyTuple_GET_ITEM(sub, 0));
        PyObject *esub = PyTuple_GET_ITEM(sub, 1);
        int ewire = (int)PyLong_AsLong(PyTuple_GET_ITEM(sub, 2));
        int got = b[p];
        int32_t count = get_i32(b + p + 1);
        p += 5;
        if ((count && got != ewire) || !count_fits(f, p, count, min_size(ewire)))
            return NULL;
        int64_t per = (kind == K_LIST ? COST_LIST_SLOT : COST_SET_SLOT) + scalar_cost(ekind);
        if (charge(f, (kind == K_LIST ? COST_LIST : COST_SET) + (int64_t)count * per) < 0)
            return NULL;
        PyObject *out = kind == K_LIST ? PyList_New(count) : PySet_New(NULL);
        if (out == NULL) return NULL;
        for (int32_t i = 0; i < count; i++) {
            PyObject *v = read_value(f, &p, ekind, esub, depth + 1);
            if (v == NULL) { Py_DECREF(out); return NULL; }
            if (kind == K_LIST) {
                PyList_SET_ITEM(out, i, v);
            } else {
                int rc = PySet_Add(out, v);   /* TypeError when unhashable */
                Py_DECREF(v);
                if (rc < 0) { Py_DECREF(out); return NULL; }
            }
        }
        *pos = p;
        return out;
    }
    case K_MAP: {
        if (depth >= MAX_DEPTH || !fits(f, p, 6)) return NULL;
        PyObject *ks = PyTuple_GET_ITEM(sub, 0), *vs = PyTuple_GET_ITEM(sub, 1);
        int kkind = (int)PyLong_AsLong(PyTuple_GET_ITEM(ks, 0));
        int kwire = (int)PyLong_AsLong(PyTuple_GET_ITEM(ks, 2));
        int vkind = (int)PyLong_AsLong(PyTuple_GET_ITEM(vs, 0));
        int vwire = (int)PyLong_AsLong(PyTuple_GET_ITEM(vs, 2));
        int gotk = b[p], gotv = b[p + 1];
        int32_t count = get_i32(b + p + 2);
        p += 6;
        if ((count && (gotk != kwire || gotv != vwire)) ||
                !count_fits(f, p, count, min_size(kwire) + min_size(vwire)))
            return NULL;
        int64_t per = COST_MAP_ENTRY + scalar_cost(kkind) + scalar_cost(vkind);
        if (charge(f, COST_MAP + (int64_t)count * per) < 0)
            return NULL;
        PyObject *out = PyDict_New();
        if (out == NULL) return NULL;
        for (int32_t i = 0; i < count; i++) {
            PyObject *k = read_value(f, &p, kkind, PyTuple_GET_ITEM(ks, 1), depth + 1);
            if (k == NULL) { Py_DECREF(out); return NULL; }
            PyObject *v = read_value(f, &p, vkind, PyTuple_GET_ITEM(vs, 1), depth + 1);
            if (v == NULL) { Py_DECREF(k); Py_DECREF(out); return NULL; }
            int rc = PyDict_SetItem(out, k, v);   /* TypeError when unhashable */
            Py_DECREF(k);
            Py_DECREF(v);
            if (rc < 0) { Py_DECREF(out); return NULL; }
        }
        *pos = p;
        return out;
    }
    default:
        return NULL;
    }
}

static PyObject *
read_struct(Frame *f, Py_ssize_t *pos, PyObject *plan, int depth)
{
    if (depth >= MAX_DEPTH || PyList_GET_SIZE(plan) < 4)
        return NULL;
    PyObject *cls = PyList_GET_ITEM(plan, 0);
    PyObject *fields = PyList_GET_ITEM(plan, 1);
    Py_ssize_t cost = PyLong_AsSsize_t(PyList_GET_ITEM(plan, 3));
    if (cost < 0 || charge(f, cost) < 0)
        return NULL;
    PyObject *obj = PyObject_CallNoArgs(cls);
    if (obj == NULL)
        return NULL;
    Py_ssize_t p = *pos;
    for (;;) {
        if (!fits(f, p, 1))
            goto fail;                               /* not terminated */
        int ftype = f->buf[p];
        if (ftype == T_STOP) {
            *pos = p + 1;
            return obj;
        }
        if (!fits(f, p, 3))
            goto fail;
        int fid = (int16_t)(((unsigned)f->buf[p + 1] << 8) | f->buf[p + 2]);
        p += 3;
        PyObject *key = PyLong_FromLong((long)fid * 256 + ftype);
        if (key == NULL)
            goto fail;
        PyObject *hit = PyDict_GetItemWithError(fields, key);   /* borrowed */
        Py_DECREF(key);
        if (hit == NULL) {
            if (PyErr_Occurred())
                goto fail;
            p = skip(f, p, ftype, depth + 1);        /* unknown id or type: skipped */
            if (p < 0)
                goto fail;
            continue;
        }
        int kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(hit, 1));
        PyObject *value = read_value(f, &p, kind, PyTuple_GET_ITEM(hit, 2), depth + 1);
        if (value == NULL)
            goto fail;
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

static int
frame_of(PyObject *obj, Py_buffer *view)
{
    return PyObject_GetBuffer(obj, view, PyBUF_SIMPLE);
}

PyDoc_STRVAR(decode_struct_doc,
"decode_struct(plan, buf, pos, end, budget=sys.maxsize) -> (obj, end_pos) | None\n\n"
"Decode one struct as binary.decode_struct does, its objects charged against\n"
"`budget` bytes; None on any problem (decode again in Python for the error).");

static PyObject *
wire_decode_struct(PyObject *self, PyObject *args)
{
    PyObject *plan, *data;
    Py_ssize_t pos, end, budget = PY_SSIZE_T_MAX;
    if (!PyArg_ParseTuple(args, "O!Onn|n:decode_struct", &PyList_Type, &plan, &data, &pos,
                          &end, &budget))
        return NULL;
    Py_buffer view;
    if (frame_of(data, &view) < 0)
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
    PyObject *result = Py_BuildValue("(Nn)", obj, pos);
    return result;
}

PyDoc_STRVAR(read_message_header_doc,
"read_message_header(buf, strict_read) -> (name, type, seqid, end) | None\n\n"
"As binary.read_message_header; None on any problem.");

static PyObject *
wire_read_message_header(PyObject *self, PyObject *args)
{
    PyObject *data;
    int strict;
    if (!PyArg_ParseTuple(args, "Op:read_message_header", &data, &strict))
        return NULL;
    Py_buffer view;
    if (frame_of(data, &view) < 0)
        return NULL;
    Frame f = {(const unsigned char *)view.buf, view.len, 0};
    const unsigned char *b = f.buf;
    PyObject *result = NULL;
    Py_ssize_t start, after, end;
    int mtype;
    int32_t seqid;
    if (!fits(&f, 0, 4))
        goto none;
    int32_t word = get_i32(b);
    if (word < 0) {
        if (((uint32_t)word & 0xFFFF0000u) != 0x80010000u || !fits(&f, 4, 4))
            goto none;
        int32_t n = get_i32(b + 4);
        start = 8;
        if (n < 0 || !fits(&f, start, (Py_ssize_t)n + 4))
            goto none;
        after = start + n;
        mtype = (int)((uint32_t)word & 0xFF);
        seqid = get_i32(b + after);
        end = after + 4;
    } else {
        if (strict)
            goto none;
        start = 4;
        if (!fits(&f, start, (Py_ssize_t)word + 5))
            goto none;
        after = start + word;
        mtype = b[after];
        seqid = get_i32(b + after + 1);
        end = after + 5;
    }
    PyObject *name = PyUnicode_DecodeUTF8((const char *)b + start, after - start, "strict");
    if (name == NULL) {
        PyErr_Clear();
        goto none;
    }
    result = Py_BuildValue("(Niin)", name, mtype, (int)seqid, end);
    PyBuffer_Release(&view);
    return result;
none:
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------ encoding
 *
 * The reply side: encode_message writes what thriftpy2's Cython writer
 * (TCyBinaryProtocol with strict_write=True: write_message_begin, then write_struct)
 * writes for the same payload, byte for byte, optionally behind the 4-byte frame
 * length. Why: the writer itself is C, but driving it from Python (a per-thread buffer
 * and protocol, getvalue, clean, then the frame prefix joined on) made the framed echo
 * reply cost 0.55 us; from here it costs 0.14 us, and Nimbus's bigger structs cost 2.5x
 * less (timeit, CPython 3.11, thriftpy2 0.7.1).
 *
 * Like the decoder above, this code never explains a failure: on anything it does not
 * take exactly as the writer would (a value of another Python type, an int out of
 * range, a str that is not UTF-8 encodable, nesting past MAX_DEPTH, ...) it returns
 * None and binary.py encodes again with thriftpy2, which writes the same bytes or raises
 * the precise error. Refusing more than thriftpy2 does only costs speed; accepting a
 * value thriftpy2 writes differently would be a bug, so each value check below says
 * what thriftpy2 (cybin.pyx, c_write_val) does with that value.
 *
 * The fields of a struct are written in the order of plan[2] (built from thrift_spec in
 * its iteration order, which is the order cybin's write_struct walks), each as
 *     plan[2][i] = (attribute name, kind, sub, field id, wire type)
 * with kind and sub as in the decoder's plan.
 */

/* A frame's length is a signed i32 to most Thrift readers: a reply the C encoder would
 * make longer than that (prefix included) is left to thriftpy2 (which then raises or
 * writes a frame nobody reads; either way it is not ours to guess). */
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

static int
put_bytes(Out *o, const void *p, Py_ssize_t n)
{
    if (out_reserve(o, n) < 0)
        return -1;
    memcpy(o->data + o->len, p, (size_t)n);
    o->len += n;
    return 0;
}

static void
set_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* Big-endian, the `n` low bytes of v (n = 1, 2, 4 or 8). */
static int
put_be(Out *o, uint64_t v, int n)
{
    if (out_reserve(o, n) < 0)
        return -1;
    for (int i = n - 1; i >= 0; i--)
        o->data[o->len++] = (unsigned char)(v >> (8 * i));
    return 0;
}

/* A value of an integer type. thriftpy2 converts it with Cython, which takes any int
 * (bool and int subclasses included, read without calling Python code) and raises
 * OverflowError out of the C type's range; other types go through __index__ or
 * __int__, which we leave to it. */
static int
put_int(Out *o, PyObject *v, long long lo, long long hi, int n)
{
    if (!PyLong_Check(v))
        return -1;
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred()) || x < lo || x > hi)
        return -1;
    return put_be(o, (uint64_t)x, n);
}

/* i32 length then the bytes; lengths past i32 are thriftpy2's to handle (its `int`
 * length would wrap). */
static int
put_sized(Out *o, const char *p, Py_ssize_t n)
{
    if (n > INT32_MAX || put_be(o, (uint64_t)n, 4) < 0)
        return -1;
    return put_bytes(o, p, n);
}

/* A `string`, or a `binary` inside a container (thriftpy2 writes those as strings): an
 * exact str as UTF-8 (its strict encode; lone surrogates fail), exact bytes as they
 * are. thriftpy2 refuses everything else except objects whose own .encode() returns
 * bytes, and str or bytes subclasses, which we leave to it. */
static int
put_string(Out *o, PyObject *v)
{
    if (PyUnicode_CheckExact(v)) {
        Py_ssize_t n;
        const char *p = PyUnicode_AsUTF8AndSize(v, &n);   /* no copy for ASCII */
        return p == NULL ? -1 : put_sized(o, p, n);
    }
    if (PyBytes_CheckExact(v))
        return put_sized(o, PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v));
    return -1;
}

/* A `binary` field: thriftpy2 encodes a str as UTF-8 (with its .encode(), which a str
 * subclass may override: those are left to it) and writes anything with a contiguous
 * buffer (bytes, bytearray, memoryview, ...) as it is, asked for with these flags. */
static int
put_binary(Out *o, PyObject *v)
{
    if (PyUnicode_CheckExact(v) || PyBytes_CheckExact(v))
        return put_string(o, v);
    if (PyByteArray_CheckExact(v))
        return put_sized(o, PyByteArray_AS_STRING(v), PyByteArray_GET_SIZE(v));
    if (PyUnicode_Check(v) || !PyObject_CheckBuffer(v))
        return -1;
    Py_buffer view;
    if (PyObject_GetBuffer(v, &view, PyBUF_SIMPLE | PyBUF_ANY_CONTIGUOUS) < 0)
        return -1;
    int rc = put_sized(o, view.buf, view.len);
    PyBuffer_Release(&view);
    return rc;
}

/* A container element's (kind, sub, wire) from the plan. */
static int
element_of(PyObject *t, int *kind, PyObject **sub, int *wire)
{
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 3)
        return -1;
    *kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(t, 0));
    *sub = PyTuple_GET_ITEM(t, 1);
    *wire = (int)PyLong_AsLong(PyTuple_GET_ITEM(t, 2));
    /* cybin's write_list and write_dict turn an element type of `binary` into `string`
     * before writing the elements, so a bytearray there is refused, a str encoded. */
    if (*kind == K_BINARY)
        *kind = K_STRING;
    return PyErr_Occurred() ? -1 : 0;
}

static int write_struct(Out *o, PyObject *obj, PyObject *plan, int depth);

static int
write_value(Out *o, PyObject *v, int kind, PyObject *sub, int depth)
{
    switch (kind) {
    case K_BOOL:
        /* thriftpy2 writes `1 if v else 0` for any v; only bool and exact int are
         * taken here, where truth runs no Python code. */
        if (PyBool_Check(v))
            return put_be(o, v == Py_True, 1);
        if (PyLong_CheckExact(v))
            return put_be(o, PyObject_IsTrue(v) == 1, 1);
        return -1;
    case K_BYTE:
        return put_int(o, v, -128, 127, 1);          /* Cython's `char`: signed here */
    case K_I16:
        return put_int(o, v, INT16_MIN, INT16_MAX, 2);
    case K_I32:
        return put_int(o, v, INT32_MIN, INT32_MAX, 4);   /* enums are ints */
    case K_I64:
        return put_int(o, v, INT64_MIN, INT64_MAX, 8);
    case K_DOUBLE: {
        /* Cython's double conversion: a float (subclasses too, read directly) or an
         * exact int or bool as float(v), which may overflow. */
        double d;
        if (PyFloat_Check(v))
            d = PyFloat_AS_DOUBLE(v);
        else if (PyLong_CheckExact(v) || PyBool_Check(v))
            d = PyLong_AsDouble(v);
        else
            return -1;
        if (d == -1.0 && PyErr_Occurred())
            return -1;
        uint64_t bits;
        memcpy(&bits, &d, sizeof bits);          /* NaN payloads kept, as cybin does */
        return put_be(o, bits, 8);
    }
    case K_STRING:
        return put_string(o, v);
    case K_BINARY:
        return put_binary(o, v);
    case K_STRUCT:
        return write_struct(o, v, sub, depth);
    case K_LIST:
    case K_SET: {
        /* thriftpy2 takes any sized iterable for either (len(v), then `for e in v`);
         * here lists, tuples, sets and frozensets of the exact types, whose order is
         * the same from C. */
        int ekind, ewire;
        PyObject *esub;
        if (depth >= MAX_DEPTH || element_of(sub, &ekind, &esub, &ewire) < 0)
            return -1;
        int seq = PyList_CheckExact(v) || PyTuple_CheckExact(v);
        if (!seq && !PyAnySet_CheckExact(v))
            return -1;
        Py_ssize_t n = PyObject_Length(v);
        if (n < 0 || n > INT32_MAX || put_be(o, (uint64_t)ewire, 1) < 0 ||
                put_be(o, (uint64_t)n, 4) < 0)
            return -1;
        Py_ssize_t written = 0;
        if (seq) {
            /* Re-read the size each pass: nothing here runs Python code that could
             * change the list, but indexing past a shrunk list must be impossible. */
            for (; written < n && written < PySequence_Fast_GET_SIZE(v); written++) {
                PyObject *item = PySequence_Fast_GET_ITEM(v, written);
                Py_INCREF(item);
                int rc = write_value(o, item, ekind, esub, depth + 1);
                Py_DECREF(item);
                if (rc < 0)
                    return -1;
            }
        } else {
            /* A set's iterator raises if the set changes size meanwhile. */
            PyObject *it = PyObject_GetIter(v), *item;
            if (it == NULL)
                return -1;
            int rc = 0;
            while (rc == 0 && (item = PyIter_Next(it)) != NULL) {
                rc = write_value(o, item, ekind, esub, depth + 1);
                Py_DECREF(item);
                written++;
            }
            Py_DECREF(it);
            if (rc < 0 || PyErr_Occurred())
                return -1;
        }
        return written == n ? 0 : -1;     /* the count in the header must be true */
    }
    case K_MAP: {
        /* thriftpy2: len(v), then v.items(); here exact dicts, in the same order. */
        int kkind, kwire, vkind, vwire;
        PyObject *ksub, *vsub;
        if (depth >= MAX_DEPTH || !PyTuple_Check(sub) || PyTuple_GET_SIZE(sub) != 2 ||
                element_of(PyTuple_GET_ITEM(sub, 0), &kkind, &ksub, &kwire) < 0 ||
                element_of(PyTuple_GET_ITEM(sub, 1), &vkind, &vsub, &vwire) < 0 ||
                !PyDict_CheckExact(v))
            return -1;
        Py_ssize_t n = PyDict_GET_SIZE(v);
        if (n > INT32_MAX || put_be(o, (uint64_t)kwire, 1) < 0 ||
                put_be(o, (uint64_t)vwire, 1) < 0 || put_be(o, (uint64_t)n, 4) < 0)
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
            if (rc < 0)
                return -1;
            written++;
        }
        return written == n ? 0 : -1;
    }
    default:
        return -1;
    }
}

/* getattr(obj, name, None), as cybin's write_struct reads a field: a missing attribute
 * is an unset field (the dispatcher makes result structs without __init__, so every
 * field but the one it sets is missing), and it costs no exception object here. */
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
    /* cybin writes a struct with the thrift_spec of the object it is given, whatever
     * its class; only the exact class the plan was made from is encoded here. */
    if (depth >= MAX_DEPTH || !PyList_Check(plan) || PyList_GET_SIZE(plan) < 3 ||
            (PyObject *)Py_TYPE(obj) != PyList_GET_ITEM(plan, 0))
        return -1;
    PyObject *order = PyList_GET_ITEM(plan, 2);
    if (!PyTuple_Check(order))
        return -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(order); i++) {
        PyObject *field = PyTuple_GET_ITEM(order, i), *value;
        if (!PyTuple_Check(field) || PyTuple_GET_SIZE(field) != 5)
            return -1;
        int got = field_value(obj, PyTuple_GET_ITEM(field, 0), &value);
        if (got < 0)
            return -1;
        if (got == 0 || value == Py_None) {          /* unset: not written */
            Py_XDECREF(value);
            continue;
        }
        int kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(field, 1));
        long fid = PyLong_AsLong(PyTuple_GET_ITEM(field, 3));
        long wire = PyLong_AsLong(PyTuple_GET_ITEM(field, 4));
        int rc = -1;
        if (!PyErr_Occurred() && put_be(o, (uint64_t)wire, 1) == 0 &&
                put_be(o, (uint64_t)fid, 2) == 0)   /* cybin: an int16_t, truncated */
            rc = write_value(o, value, kind, PyTuple_GET_ITEM(field, 2), depth + 1);
        Py_DECREF(value);
        if (rc < 0)
            return -1;
    }
    return put_be(o, T_STOP, 1);
}

PyDoc_STRVAR(encode_message_doc,
"encode_message(name, type, seqid, payload, plan, framed=True) -> bytes | None\n\n"
"A strict TBinaryProtocol message (header, then `payload` per `plan`), as\n"
"thriftpy2's writer makes it, behind its 4-byte frame length when `framed`;\n"
"None on any problem (encode again with thriftpy2 for the error).");

static PyObject *
wire_encode_message(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 5 || nargs > 6) {
        PyErr_SetString(PyExc_TypeError,
                        "encode_message(name, type, seqid, payload, plan, framed=True)");
        return NULL;
    }
    PyObject *name = args[0], *payload = args[3], *plan = args[4];
    int framed = 1;
    if (nargs == 6 && (framed = PyObject_IsTrue(args[5])) < 0)
        return NULL;
    /* cybin ORs the type into the version word (only 0..255 leaves the version
     * intact) and converts the seqid to an int32_t. */
    if (!PyLong_Check(args[1]) || !PyLong_Check(args[2]))
        Py_RETURN_NONE;
    long mtype = PyLong_AsLong(args[1]);
    long long seqid = PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred() || mtype < 0 || mtype > 0xFF || seqid < INT32_MIN ||
            seqid > INT32_MAX) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    Out o;
    out_init(&o);
    PyObject *result = NULL;
    if ((!framed || put_be(&o, 0, 4) == 0) &&                /* the length, set below */
            put_be(&o, 0x80010000u | (uint32_t)mtype, 4) == 0 &&
            put_string(&o, name) == 0 && put_be(&o, (uint64_t)seqid, 4) == 0 &&
            write_struct(&o, payload, plan, 0) == 0) {
        if (framed)
            set_u32(o.data, (uint32_t)(o.len - 4));
        result = PyBytes_FromStringAndSize((const char *)o.data, o.len);
    }
    out_free(&o);
    if (result == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return result;
}

PyDoc_STRVAR(call_name_doc,
"call_name(frame) -> bytes | None\n\n"
"The method name of a strict binary CALL message in frame (bytes or bytearray, a\n"
"frame's payload), as bytes; None for anything else. What the selector keys its\n"
"inline calls by (rpc/inline.py), without decoding the message.");

static PyObject *
wire_call_name(PyObject *self, PyObject *frame)
{
    const unsigned char *p;
    Py_ssize_t n;
    if (PyBytes_CheckExact(frame)) {
        p = (const unsigned char *)PyBytes_AS_STRING(frame);
        n = PyBytes_GET_SIZE(frame);
    } else if (PyByteArray_CheckExact(frame)) {
        p = (const unsigned char *)PyByteArray_AS_STRING(frame);
        n = PyByteArray_GET_SIZE(frame);
    } else {
        Py_RETURN_NONE;
    }
    /* version 1, type CALL (1), then the name's length, big-endian */
    if (n < 8 || p[0] != 0x80 || p[1] != 0x01 || p[2] != 0x00 || p[3] != 0x01)
        Py_RETURN_NONE;
    uint32_t size = ((uint32_t)p[4] << 24) | ((uint32_t)p[5] << 16) |
                    ((uint32_t)p[6] << 8) | (uint32_t)p[7];
    if (size > (uint64_t)(n - 8))
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)p + 8, (Py_ssize_t)size);
}

static PyMethodDef wire_methods[] = {
    {"call_name", wire_call_name, METH_O, call_name_doc},
    {"decode_struct", wire_decode_struct, METH_VARARGS, decode_struct_doc},
    {"read_message_header", wire_read_message_header, METH_VARARGS, read_message_header_doc},
    {"encode_message", (PyCFunction)(void (*)(void))wire_encode_message, METH_FASTCALL,
     encode_message_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef wire_module = {
    PyModuleDef_HEAD_INIT, "nimbus_thrift.rpc._wire",
    "TBinaryProtocol decoding and encoding fast paths; binary.py has the errors.", -1,
    wire_methods,
};

PyMODINIT_FUNC
PyInit__wire(void)
{
    PyObject *m = PyModule_Create(&wire_module);
    if (m == NULL)
        return NULL;
    PyObject *costs = Py_BuildValue(
        "(iiiiiiiiiiiiiii)", COST_INT, COST_DOUBLE, COST_BOOL, COST_BYTES, COST_STR_ASCII,
        COST_STR, COST_STR_CHAR, COST_STRUCT, COST_STRUCT_FIELD, COST_LIST, COST_LIST_SLOT,
        COST_SET, COST_SET_SLOT, COST_MAP, COST_MAP_ENTRY);
    if (PyModule_AddIntConstant(m, "MAX_DEPTH", MAX_DEPTH) < 0 ||
            PyModule_AddObject(m, "COSTS", costs) < 0) {
        Py_XDECREF(costs);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
