/* TCompactProtocol encoding in C: the reply fast path of nimbus_thrift/rpc/codec/compact.py
 * (encode_message; the _compact module that lists it is in _compact.c).
 *
 * What compact._Writer writes, byte for byte; None (then Python encodes, or raises) on
 * any value it might take differently: only exact types here (bool and int for bool and
 * integers, float or exact int for double, exact str/bytes/bytearray for strings,
 * exact list/tuple/set/frozenset, exact dict, the plan's own class for structs).
 *
 * Plans are as in _wirecommon.h; the output buffer is _wireout.h's, shared with the
 * binary encoder (_wireencode.c).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "_wirecommon.h"
#include "_wireout.h"
#include "_compact.h"

static inline int
put_byte(Out *o, unsigned char b)
{
    if (out_reserve(o, 1) < 0)
        return -1;
    o->data[o->len++] = b;
    return 0;
}

static int
put_varint(Out *o, uint64_t n)
{
    if (out_reserve(o, 10) < 0)
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
    if (n > 0x7FFFFFFF || put_varint(o, (uint64_t)n) < 0)
        return -1;
    return put_bytes(o, p, n);
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
        return put_bytes(o, raw, 8);
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
        if (depth >= MAX_DEPTH || plan_element(sub, &ekind, &esub) < 0)
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
                plan_element(PyTuple_GET_ITEM(sub, 0), &kkind, &ksub) < 0 ||
                plan_element(PyTuple_GET_ITEM(sub, 1), &vkind, &vsub) < 0 ||
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

const char compact_encode_message_doc[] = PyDoc_STR(
"encode_message(name, type, seqid, payload, plan) -> bytes | None\n\n"
"A compact message as compact.encode_message writes it; None on any problem.");

PyObject *
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
    out_init(&o);
    PyObject *result = NULL;
    Py_ssize_t n;
    const char *p = PyUnicode_AsUTF8AndSize(name, &n);
    if (p != NULL && put_byte(&o, 0x82) == 0 &&
            put_byte(&o, (unsigned char)(1 | ((mtype << 5) & 0xE0))) == 0 &&
            put_varint(&o, (uint64_t)(uint32_t)(int32_t)seqid) == 0 &&
            put_sized(&o, p, n) == 0 && write_struct(&o, payload, plan, 0) == 0)
        result = PyBytes_FromStringAndSize((const char *)o.data, o.len);
    out_free(&o);
    if (result == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return result;
}
