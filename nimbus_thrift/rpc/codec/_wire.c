/* TBinaryProtocol decoding in C: the fast paths of nimbus_thrift/rpc/codec/binary.py, and the
 * _wire module itself (its method table and constants, at the end of this file).
 *
 * Why: the Python decoder costs about 2 us per small call (message header plus
 * arguments), a seventh of a call's whole cost on one core. This file does the same
 * walk over the frame, with the same bounds, count and nesting checks, but it says
 * nothing about what went wrong: on any problem it returns None and binary.py decodes
 * the frame again in Python, which raises the precise DecodeError. So the C code never
 * accepts what the Python decoder refuses (tests/unit/rpc/codec/test_binary_*.py runs every case through
 * both, plus a differential fuzz), and every error message lives in one place.
 *
 * The encoding fast path (replies) is in _wireencode.c; it works the same way. The
 * plan both walk, the kind codes, the costs and the budget are in _wirecommon.h.
 *
 * The decoder also charges every object it makes against the frame's decoded-size
 * budget (rpc/codec/decoded.py has the costs and why; binary.py charges the same amounts at
 * the same objects, so the two still agree on every frame and budget): a container's
 * object, slots and scalar elements in one step before it is made, a struct's object
 * before it is made, a string or binary by its size, a scalar field as it is set. Each
 * charge is a compare and a subtraction.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "_wirecommon.h"
#include "_wire.h"

/* Every helper returns NULL (values) or -1 (offsets) on a problem. A Python exception
 * may or may not be set; the entry points clear it and return None either way. */

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
     wire_encode_message_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef wire_module = {
    PyModuleDef_HEAD_INIT, "nimbus_thrift.rpc.codec._wire",
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
