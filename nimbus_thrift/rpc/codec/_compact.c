/* TCompactProtocol decoding in C: the decoding fast path of nimbus_thrift/rpc/codec/compact.py,
 * and the _compact module itself (its method table, at the end of this file). Its
 * other parts: _compactencode.c (replies) and _compactscan.c (where an unframed
 * message ends); _compact.h joins them.
 *
 * Why: the Python codec costs 1.2 us to decode Echo.echo's args and 1.4 us to encode its
 * result, and 110 us / 160 us for a 20-supervisor ClusterSummary (scripts/bench/
 * protocol_forms.py), against 0.4 / 0.15 us and 16 / 6 us for binary in _wire.c.
 *
 * The rules are compact.py's, which stays the reference and the one that explains: on
 * any problem these functions return None and compact.py decodes (or encodes) again in
 * Python, which raises the precise error. So this code must never accept what the
 * Python codec refuses, nor write other bytes than it writes; refusing more only costs
 * speed. tests/unit/rpc/codec/test_compact.py runs every case through both, and the compact fuzz
 * (tests/support/compact_fuzz.py) compares them on mutated input.
 *
 * The decoder charges the decoded-size budget exactly as compact.py (and the binary
 * decoders) do: a struct before it is made, a container's object, slots and scalar
 * elements before its loop, a binary by its size before, a string by its characters
 * after, a scalar field as it is set.
 *
 * Plans are binary.c_plan's (see _wirecommon.h): [cls, fields, order, cost] with
 * fields = {fid * 256 + binary wire type: (name, kind, sub)}; a compact field type is
 * mapped to the binary wire type to look it up.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "_wirecommon.h"
#include "_compact.h"
#include "_compactread.h"

/* The binary wire type a compact field type stands for (-1: unknown). */
static int
wire_of(int ctype)
{
    static const int map[] = {-1, T_BOOL, T_BOOL, T_BYTE, T_I16, T_I32, T_I64, T_DOUBLE,
                              T_STRING, T_LIST, T_SET, T_MAP, T_STRUCT};
    return ctype >= 0 && ctype <= C_STRUCT ? map[ctype] : -1;
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
        if (s != NULL && charge(f, string_cost(s)) < 0) { Py_DECREF(s); return NULL; }
        return s;
    }
    case K_STRUCT:
        return read_struct(f, pos, sub, depth);
    case K_LIST:
    case K_SET: {
        int ekind, got;
        PyObject *esub;
        uint64_t count;
        if (depth >= MAX_DEPTH || plan_element(sub, &ekind, &esub) < 0 ||
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
        if (plan_element(PyTuple_GET_ITEM(sub, 0), &kkind, &ksub) < 0 ||
                plan_element(PyTuple_GET_ITEM(sub, 1), &vkind, &vsub) < 0 ||
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

static PyMethodDef compact_methods[] = {
    {"scan_message", compact_scan_message, METH_VARARGS, compact_scan_message_doc},
    {"decode_struct", compact_decode_struct, METH_VARARGS, decode_struct_doc},
    {"encode_message", (PyCFunction)(void (*)(void))compact_encode_message, METH_FASTCALL,
     compact_encode_message_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef compact_module = {
    PyModuleDef_HEAD_INIT, "nimbus_thrift.rpc.codec._compact",
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
