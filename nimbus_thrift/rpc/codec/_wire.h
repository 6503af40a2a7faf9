/* The parts of the _wire extension (TBinaryProtocol) and what joins them: _wire.c
 * decodes and holds the module (its method table lists every entry point),
 * _wireencode.c encodes replies. Declared here so both files are checked against one
 * signature.
 */
#ifndef NIMBUS_THRIFT_WIRE_H
#define NIMBUS_THRIFT_WIRE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* _wireencode.c: encode_message(name, type, seqid, payload, plan, framed=True). */
extern const char wire_encode_message_doc[];
PyObject *wire_encode_message(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif /* NIMBUS_THRIFT_WIRE_H */
