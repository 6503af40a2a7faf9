/* The parts of the _compact extension (TCompactProtocol) and what joins them: the
 * compact type codes and the kind-to-type map, and the entry points the module's
 * method table (in _compact.c, with the decoder) lists from the other parts:
 * _compactencode.c (replies) and _compactscan.c (where an unframed message ends).
 * Declared here so each part is checked against one signature.
 */
#ifndef NIMBUS_THRIFT_COMPACT_H
#define NIMBUS_THRIFT_COMPACT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_wirecommon.h"

/* Compact types. */
enum { C_STOP, C_TRUE, C_FALSE, C_BYTE, C_I16, C_I32, C_I64, C_DOUBLE, C_BINARY, C_LIST,
       C_SET, C_MAP, C_STRUCT };

/* compact.TO_COMPACT for a plan kind (K_STRING and K_BINARY are both C_BINARY). */
static inline int
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

/* _compactencode.c: encode_message(name, type, seqid, payload, plan). */
extern const char compact_encode_message_doc[];
PyObject *compact_encode_message(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

/* _compactscan.c: scan_message(buf, compact, limit). */
extern const char compact_scan_message_doc[];
PyObject *compact_scan_message(PyObject *self, PyObject *args);

#endif /* NIMBUS_THRIFT_COMPACT_H */
