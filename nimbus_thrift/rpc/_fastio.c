/* Socket calls that keep the GIL when they cannot block.
 *
 * Why: CPython's socket methods release the GIL around every recv and send. On a
 * nonblocking socket those calls never wait, but releasing still hands the GIL to any
 * thread that wants it: with the selector and a worker both runnable, every syscall
 * became a GIL hand-off. Measured with `scripts/bench.sh --strace` at 16 connections:
 * 12.7 futex calls per request, against 1 recv and 1 send. These versions keep the GIL
 * for small transfers (the kernel call is a copy, shorter than a hand-off) and release
 * it only when a call may wait (epoll_wait with a timeout) or copies a lot
 * (>= RELEASE_AT bytes), where letting other threads run is worth the switch.
 *
 * Semantics follow the socket methods they replace: a socket object (anything with
 * fileno()) or a descriptor (or a stream object with methods of the same names, see
 * DELEGATE_STREAMS); errors raise OSError subclasses chosen by errno
 * (BlockingIOError for EAGAIN, ConnectionResetError, ...); EINTR is retried. Sends use
 * MSG_NOSIGNAL, so a vanished peer is an error, never a SIGPIPE.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <stdint.h>
#include <unistd.h>

/* Transfers at least this large release the GIL: the copy then costs more than the
 * hand-off. */
#define RELEASE_AT (64 * 1024)
/* Buffers per sendmsg; the caller batches well under IOV_MAX (1024). */
#define MAX_IOV 1024
/* Events per epoll_wait call, as the selector asks for. */
#define MAX_EVENTS 4096

static int
fd_of(PyObject *obj)
{
    return PyObject_AsFileDescriptor(obj);   /* int, or an object with fileno() */
}

/* A stream that is neither a descriptor nor a socket (no fileno(): a TLS connection,
 * rpc/tls.py) does its own I/O: the call becomes its method of the same name, with
 * the same arguments. Plain descriptors, the hot path, never get here. */
static int
is_stream(PyObject *obj)
{
    return !PyLong_Check(obj) && !PyObject_HasAttrString(obj, "fileno");
}

static PyObject *
delegate(PyObject *args, const char *name)
{
    PyObject *method = PyObject_GetAttrString(PyTuple_GET_ITEM(args, 0), name);
    if (method == NULL)
        return NULL;
    PyObject *rest = PyTuple_GetSlice(args, 1, PyTuple_GET_SIZE(args));
    if (rest == NULL) {
        Py_DECREF(method);
        return NULL;
    }
    PyObject *result = PyObject_Call(method, rest, NULL);
    Py_DECREF(rest);
    Py_DECREF(method);
    return result;
}

#define DELEGATE_STREAMS(args, name)                                              \
    if (PyTuple_GET_SIZE(args) >= 1 && is_stream(PyTuple_GET_ITEM(args, 0)))       \
        return delegate(args, name);


/* TLS connections, natively. ssl.SSLSocket's recv_into and send pass through three
 * Python frames each (SSLSocket.recv_into, .read, our TLSStream's error mapping)
 * before reaching the C object that does the work, ssl's _ssl._SSLSocket (the
 * SSLSocket's _sslobj). When rpc/tls.py registers that type and ssl's exceptions
 * (use_tls), a connection whose io is such an object is read and written here: its
 * C methods read(n, buffer) and write(data), with the same error mapping as
 * TLSStream -- "would block" (SSLWantRead/WriteError) becomes BlockingIOError, the
 * peer's close_notify or a ragged EOF reads as 0 bytes, any other SSLError becomes a
 * ConnectionError "TLS error: <reason>". Measured with scripts/bench.sh --tls: see
 * docs/benchmarks.md. */
static PyObject *tls_type;              /* ssl's _ssl._SSLSocket */
static PyObject *tls_want_read, *tls_want_write, *tls_zero_return, *tls_eof, *tls_error;
static PyObject *str_read, *str_write;

static int
is_tls(PyObject *obj)
{
    return tls_type != NULL && (PyObject *)Py_TYPE(obj) == tls_type;
}

/* After a failed read or write of a TLS object: map the exception (see above). Sets
 * *eof (reads only) and returns 0 when the failure means end of stream. */
static int
tls_failed(int *eof)
{
    if (PyErr_ExceptionMatches(tls_want_read) || PyErr_ExceptionMatches(tls_want_write)) {
        PyErr_Clear();
        PyErr_SetNone(PyExc_BlockingIOError);
        return -1;
    }
    if (eof != NULL &&
            (PyErr_ExceptionMatches(tls_zero_return) || PyErr_ExceptionMatches(tls_eof))) {
        PyErr_Clear();
        *eof = 1;
        return 0;
    }
    if (PyErr_ExceptionMatches(tls_error)) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        PyObject *reason = value ? PyObject_GetAttrString(value, "reason") : NULL;
        if (reason == NULL)
            PyErr_Clear();
        if (reason != NULL && reason != Py_None)
            PyErr_Format(PyExc_ConnectionError, "TLS error: %S", reason);
        else
            PyErr_Format(PyExc_ConnectionError, "TLS error: %S", value ? value : Py_None);
        Py_XDECREF(reason);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
    }
    return -1;
}

static PyObject *
tls_recv_into(PyObject *args)
{
    PyObject *obj, *buffer;
    Py_ssize_t nbytes = 0;
    if (!PyArg_ParseTuple(args, "OO|n:recv_into", &obj, &buffer, &nbytes))
        return NULL;
    PyObject *size = PyLong_FromSsize_t(nbytes);
    if (size == NULL)
        return NULL;
    PyObject *call[3] = {obj, size, buffer};
    PyObject *result = PyObject_VectorcallMethod(str_read, call, 3, NULL);
    Py_DECREF(size);
    if (result == NULL) {
        int eof = 0;
        tls_failed(&eof);
        if (eof)
            return PyLong_FromLong(0);
    }
    return result;
}

static PyObject *
tls_write(PyObject *obj, PyObject *data)
{
    PyObject *call[2] = {obj, data};
    PyObject *result = PyObject_VectorcallMethod(str_write, call, 2, NULL);
    if (result == NULL)
        tls_failed(NULL);
    return result;
}

static PyObject *
tls_sendmsg(PyObject *obj, PyObject *seq)
{
    /* TLS has no scatter-gather write: one record stream from one buffer. A retry
     * after "would block" passes the same bytes again (see completion.unsent_part),
     * which is what OpenSSL requires of a write it could not finish. */
    PyObject *empty = PyBytes_FromStringAndSize(NULL, 0);
    if (empty == NULL)
        return NULL;
    PyObject *joined = PyObject_CallMethod(empty, "join", "O", seq);
    Py_DECREF(empty);
    if (joined == NULL)
        return NULL;
    PyObject *result = tls_write(obj, joined);
    Py_DECREF(joined);
    return result;
}

PyDoc_STRVAR(use_tls_doc,
"use_tls(sslobject_type, want_read, want_write, zero_return, eof, ssl_error) -> None\n\n"
"Read and write objects of sslobject_type (ssl's _ssl._SSLSocket) natively, mapping\n"
"ssl's exceptions as rpc/tls.py's TLSStream does.");

static PyObject *
fastio_use_tls(PyObject *self, PyObject *args)
{
    PyObject *type, *wr, *ww, *zr, *eof, *err;
    if (!PyArg_ParseTuple(args, "O!OOOOO:use_tls", &PyType_Type, &type, &wr, &ww, &zr,
                          &eof, &err))
        return NULL;
    if (str_read == NULL) {
        str_read = PyUnicode_InternFromString("read");
        str_write = PyUnicode_InternFromString("write");
        if (str_read == NULL || str_write == NULL)
            return NULL;
    }
    PyObject *olds[6] = {tls_type, tls_want_read, tls_want_write, tls_zero_return,
                         tls_eof, tls_error};
    Py_INCREF(type); Py_INCREF(wr); Py_INCREF(ww); Py_INCREF(zr); Py_INCREF(eof);
    Py_INCREF(err);
    tls_type = type;
    tls_want_read = wr;
    tls_want_write = ww;
    tls_zero_return = zr;
    tls_eof = eof;
    tls_error = err;
    for (int i = 0; i < 6; i++)
        Py_XDECREF(olds[i]);
    Py_RETURN_NONE;
}

enum op { OP_RECV, OP_SEND, OP_SENDMSG };

/* One recv or send of n bytes at target, or sendmsg of the msghdr target (n bytes in
 * all), retried on EINTR, the GIL kept below RELEASE_AT. Returns a new int, or NULL
 * with OSError set. */
static PyObject *
transfer(int fd, enum op op, void *target, Py_ssize_t n)
{
    ssize_t done;
    int err;
    for (;;) {
        int release = n >= RELEASE_AT;
        PyThreadState *saved = release ? PyEval_SaveThread() : NULL;
        switch (op) {
        case OP_RECV:
            done = recv(fd, target, (size_t)n, 0);
            break;
        case OP_SEND:
            done = send(fd, target, (size_t)n, MSG_NOSIGNAL);
            break;
        default:
            done = sendmsg(fd, (struct msghdr *)target, MSG_NOSIGNAL);
            break;
        }
        err = errno;
        if (release)
            PyEval_RestoreThread(saved);
        if (done >= 0 || err != EINTR)
            break;
        if (PyErr_CheckSignals() < 0)
            return NULL;
    }
    if (done < 0) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromSsize_t(done);
}

PyDoc_STRVAR(recv_into_doc,
"recv_into(sock, buffer, nbytes=0) -> int\n\n"
"Like socket.recv_into on a nonblocking socket; keeps the GIL below 64 KiB.");

static PyObject *
fastio_recv_into(PyObject *self, PyObject *args)
{
    if (PyTuple_GET_SIZE(args) >= 1 && is_tls(PyTuple_GET_ITEM(args, 0)))
        return tls_recv_into(args);
    DELEGATE_STREAMS(args, "recv_into")
    PyObject *sock;
    Py_buffer buf;
    Py_ssize_t nbytes = 0;
    if (!PyArg_ParseTuple(args, "Ow*|n:recv_into", &sock, &buf, &nbytes))
        return NULL;
    int fd = fd_of(sock);
    if (fd < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    if (nbytes < 0 || nbytes > buf.len) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "nbytes is negative or larger than the buffer");
        return NULL;
    }
    if (nbytes == 0)
        nbytes = buf.len;
    PyObject *result = transfer(fd, OP_RECV, buf.buf, nbytes);
    PyBuffer_Release(&buf);
    return result;
}

PyDoc_STRVAR(recv_frame_doc,
"recv_frame(sock, buffer, nbytes=0) -> (int, bytes | None)\n\n"
"recv_into, and when what arrived is exactly one whole frame (a big-endian length\n"
"prefix equal to the bytes after it, at least one), that frame's payload as bytes:\n"
"the common read of a small request, in one call instead of four.");

static PyObject *
fastio_recv_frame(PyObject *self, PyObject *args)
{
    PyObject *count = fastio_recv_into(self, args);
    if (count == NULL)
        return NULL;
    Py_ssize_t n = PyLong_AsSsize_t(count);
    if (n == -1 && PyErr_Occurred()) {
        Py_DECREF(count);
        return NULL;
    }
    PyObject *body = Py_None;
    Py_INCREF(body);
    if (n > 4) {
        Py_buffer buf;
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(args, 1), &buf, PyBUF_SIMPLE) < 0) {
            Py_DECREF(count);
            Py_DECREF(body);
            return NULL;
        }
        const unsigned char *p = buf.buf;
        if (buf.len >= n) {
            uint32_t size = ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
                            ((uint32_t)p[2] << 8) | (uint32_t)p[3];
            if ((uint64_t)size == (uint64_t)(n - 4)) {
                Py_DECREF(body);
                body = PyBytes_FromStringAndSize((const char *)p + 4, n - 4);
            }
        }
        PyBuffer_Release(&buf);
        if (body == NULL) {
            Py_DECREF(count);
            return NULL;
        }
    }
    PyObject *result = PyTuple_Pack(2, count, body);
    Py_DECREF(count);
    Py_DECREF(body);
    return result;
}

PyDoc_STRVAR(send_doc,
"send(sock, data) -> int\n\n"
"Like socket.send on a nonblocking socket (MSG_NOSIGNAL); keeps the GIL below 64 KiB.");

static PyObject *
fastio_send(PyObject *self, PyObject *args)
{
    if (PyTuple_GET_SIZE(args) == 2 && is_tls(PyTuple_GET_ITEM(args, 0)))
        return tls_write(PyTuple_GET_ITEM(args, 0), PyTuple_GET_ITEM(args, 1));
    DELEGATE_STREAMS(args, "send")
    PyObject *sock;
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "Oy*:send", &sock, &buf))
        return NULL;
    int fd = fd_of(sock);
    if (fd < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    PyObject *result = transfer(fd, OP_SEND, buf.buf, buf.len);
    PyBuffer_Release(&buf);
    return result;
}

PyDoc_STRVAR(sendmsg_doc,
"sendmsg(sock, buffers) -> int\n\n"
"Like socket.sendmsg(buffers) on a nonblocking socket (MSG_NOSIGNAL); keeps the GIL\n"
"below 64 KiB in total.");

static PyObject *
fastio_sendmsg(PyObject *self, PyObject *args)
{
    if (PyTuple_GET_SIZE(args) == 2 && is_tls(PyTuple_GET_ITEM(args, 0)))
        return tls_sendmsg(PyTuple_GET_ITEM(args, 0), PyTuple_GET_ITEM(args, 1));
    DELEGATE_STREAMS(args, "sendmsg")
    PyObject *sock, *seq;
    if (!PyArg_ParseTuple(args, "OO:sendmsg", &sock, &seq))
        return NULL;
    int fd = fd_of(sock);
    if (fd < 0)
        return NULL;
    PyObject *fast = PySequence_Fast(seq, "sendmsg() buffers must be a sequence");
    if (fast == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(fast);
    if (count > MAX_IOV) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "sendmsg() takes at most %d buffers", MAX_IOV);
        return NULL;
    }
    Py_buffer *views = PyMem_Calloc(count ? (size_t)count : 1, sizeof(Py_buffer));
    struct iovec *iov = PyMem_Calloc(count ? (size_t)count : 1, sizeof(struct iovec));
    PyObject *result = NULL;
    Py_ssize_t taken = 0, total = 0;
    if (views == NULL || iov == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; taken < count; taken++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, taken);
        if (PyObject_GetBuffer(item, &views[taken], PyBUF_SIMPLE) < 0)
            goto done;
        iov[taken].iov_base = views[taken].buf;
        iov[taken].iov_len = (size_t)views[taken].len;
        total += views[taken].len;
    }
    struct msghdr msg = {0};
    msg.msg_iov = iov;
    msg.msg_iovlen = (size_t)count;
    result = transfer(fd, OP_SENDMSG, &msg, total);
done:
    for (Py_ssize_t i = 0; i < taken; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    PyMem_Free(iov);
    Py_DECREF(fast);
    return result;
}

PyDoc_STRVAR(epoll_wait_doc,
"epoll_wait(epfd, timeout=-1.0, maxevents=-1, wake_fd=-1) -> list[tuple[int, int]]\n\n"
"Like select.epoll.poll on the epoll descriptor epfd. A zero timeout keeps the GIL\n"
"(the call cannot wait); any other releases it. wake_fd, if not -1, is an eventfd\n"
"to add 1 to first, once the GIL is released: the thread it wakes can run at once.");

static int
write_eventfd(int fd)
{
    uint64_t one = 1;
    ssize_t n;
    do {
        n = write(fd, &one, sizeof one);
    } while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof one ? 0 : -1;
}

static PyObject *
fastio_epoll_wait(PyObject *self, PyObject *args)
{
    int epfd;
    double timeout = -1.0;
    int maxevents = -1;
    int wake_fd = -1;
    if (!PyArg_ParseTuple(args, "i|dii:epoll_wait", &epfd, &timeout, &maxevents, &wake_fd))
        return NULL;
    int ms;
    if (timeout < 0)
        ms = -1;
    else if (timeout * 1000.0 > (double)INT_MAX)
        ms = INT_MAX;
    else
        ms = (int)(timeout * 1000.0 + 0.999);   /* round up, as select.epoll does */
    if (maxevents <= 0 || maxevents > MAX_EVENTS)
        maxevents = MAX_EVENTS;
    struct epoll_event events[MAX_EVENTS];
    int n, err, wake_err = 0;
    for (;;) {
        if (ms == 0) {
            if (wake_fd >= 0 && write_eventfd(wake_fd) < 0)
                wake_err = errno;
            wake_fd = -1;
            n = epoll_wait(epfd, events, maxevents, 0);
            err = errno;
        } else {
            Py_BEGIN_ALLOW_THREADS
            if (wake_fd >= 0 && write_eventfd(wake_fd) < 0)
                wake_err = errno;
            wake_fd = -1;
            n = epoll_wait(epfd, events, maxevents, ms);
            err = errno;
            Py_END_ALLOW_THREADS
        }
        if (wake_err) {
            /* The worker would sleep through its tasks: fail loudly instead. */
            errno = wake_err;
            return PyErr_SetFromErrno(PyExc_OSError);
        }
        if (n >= 0 || err != EINTR)
            break;
        if (PyErr_CheckSignals() < 0)
            return NULL;
        /* select.epoll returns early on EINTR too (PEP 475 recomputes the timeout;
         * the selector loop recomputes its own), so just poll again without waiting. */
        ms = 0;
    }
    if (n < 0) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    PyObject *list = PyList_New(n);
    if (list == NULL)
        return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *item = Py_BuildValue("(iI)", events[i].data.fd, events[i].events);
        if (item == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, item);
    }
    return list;
}

PyDoc_STRVAR(grow_bytearray_doc,
"grow_bytearray(buffer, size) -> None\n\n"
"Resize the bytearray buffer to size bytes without zero-filling what is added: the\n"
"frame reader fills it by recv before anyone reads it (zeroing would write every\n"
"byte twice). Fails like bytearray resizing does while a memoryview is exported.");

static PyObject *
fastio_grow_bytearray(PyObject *self, PyObject *args)
{
    PyObject *buffer;
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "O!n:grow_bytearray", &PyByteArray_Type, &buffer, &size))
        return NULL;
    if (size < PyByteArray_GET_SIZE(buffer)) {
        PyErr_SetString(PyExc_ValueError, "grow_bytearray() cannot shrink a buffer");
        return NULL;
    }
    if (PyByteArray_Resize(buffer, size) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef fastio_methods[] = {
    {"grow_bytearray", fastio_grow_bytearray, METH_VARARGS, grow_bytearray_doc},
    {"recv_into", fastio_recv_into, METH_VARARGS, recv_into_doc},
    {"recv_frame", fastio_recv_frame, METH_VARARGS, recv_frame_doc},
    {"send", fastio_send, METH_VARARGS, send_doc},
    {"sendmsg", fastio_sendmsg, METH_VARARGS, sendmsg_doc},
    {"epoll_wait", fastio_epoll_wait, METH_VARARGS, epoll_wait_doc},
    {"use_tls", fastio_use_tls, METH_VARARGS, use_tls_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fastio_module = {
    PyModuleDef_HEAD_INIT, "nimbus_thrift.rpc._fastio",
    "Nonblocking socket calls that keep the GIL when they cannot block.",
    -1, fastio_methods,
};

PyMODINIT_FUNC
PyInit__fastio(void)
{
    return PyModule_Create(&fastio_module);
}
