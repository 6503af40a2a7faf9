/* What the binary (_wire) and compact (_compact) C codecs share: the plan they both
 * walk, its kind codes, the binary wire types and their big-endian i32, the nesting
 * limit, and the decoded-size budget every decoded object is charged against. One
 * home for each, so the two codecs cannot drift apart from each other or from the
 * Python side that checks them.
 *
 * A struct's "plan" is built once per class in binary.py (c_plan):
 *     plan   = [cls, fields, order, cost]   (a list, so recursive structs can share it;
 *              cost: what one instance is charged, binary.struct_cost)
 *     fields = {fid * 256 + wire_type: (attribute name, kind, sub)}   (decoding; the
 *              compact decoder maps its field type to the binary wire type first)
 *     order  = ((attribute name, kind, sub, fid, wire_type), ...)      (encoding, in
 *              thrift_spec's order)
 *     kind   = one of the K_* codes below; sub = the struct plan (K_STRUCT), the element
 *              (kind, sub, wire) (K_LIST, K_SET), or ((k kind, k sub, k wire),
 *              (v kind, v sub, v wire)) (K_MAP)
 *
 * The functions here are `static inline`: each extension gets its own copy, inlined at
 * every call as when each codec was a single file, so sharing them costs no call.
 */
#ifndef NIMBUS_THRIFT_WIRECOMMON_H
#define NIMBUS_THRIFT_WIRECOMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

/* binary._C_KINDS mirrors this order. */
enum { K_BOOL, K_BYTE, K_I16, K_I32, K_I64, K_DOUBLE, K_STRING, K_BINARY, K_STRUCT,
       K_LIST, K_SET, K_MAP };

/* Thrift's binary wire types (also the plan's field keys for the compact codec). */
enum { T_STOP = 0, T_BOOL = 2, T_BYTE = 3, T_DOUBLE = 4, T_I16 = 6, T_I32 = 8,
       T_I64 = 10, T_STRING = 11, T_STRUCT = 12, T_MAP = 13, T_SET = 14, T_LIST = 15 };

/* binary.MAX_DEPTH; both modules export it and binary.py / compact.py check it at
 * import. */
#define MAX_DEPTH 64

/* decoded.COSTS, in its order; _wire exports them as COSTS, checked equal at import. */
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

/* The bytes being read, and what the decoded objects may still cost. */
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

/* A big-endian i32 (binary's lengths, counts and message words). */
static inline int32_t
get_i32(const unsigned char *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
                     ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

/* A container element's kind and sub from its plan tuple (kind, sub, wire); -1 if the
 * tuple is not one. */
static inline int
plan_element(PyObject *t, int *kind, PyObject **sub)
{
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 3)
        return -1;
    *kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(t, 0));
    *sub = PyTuple_GET_ITEM(t, 1);
    return PyErr_Occurred() ? -1 : 0;
}

/* getattr(obj, name, None), as the encoders read a field (cybin's write_struct does
 * the same): a missing attribute is an unset field (the dispatcher makes result
 * structs without __init__, so every field but the one it sets is missing), and it
 * costs no exception object here. */
static inline int
field_value(PyObject *obj, PyObject *name, PyObject **value)
{
#if PY_VERSION_HEX >= 0x030D0000
    return PyObject_GetOptionalAttr(obj, name, value);
#else
    return _PyObject_LookupAttr(obj, name, value);
#endif
}

#endif /* NIMBUS_THRIFT_WIRECOMMON_H */
