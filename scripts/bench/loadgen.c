/*
 * loadgen: a closed-loop load generator for the Thrift echo benchmark.
 *
 * One thread, epoll, N nonblocking TCP connections. Each connection sends one
 * pre-encoded `Echo.echo(s)` call (framed transport, strict TBinaryProtocol),
 * waits for the complete framed reply, checks it, records the latency, and
 * sends again at once. Nothing is encoded or allocated per call, so the
 * generator costs a few syscalls per call; it reports its own CPU time so
 * bench_servers.py can show on every run that it was not the bottleneck.
 *
 * Request frame (big-endian), payload length P:
 *
 *   offset  size  field
 *   0       4     frame length = 28 + P (bytes after this field)
 *   4       4     0x80010001            strict version | message type CALL (1)
 *   8       4     4                     method name length
 *   12      4     "echo"
 *   16      4     seqid                 per connection: its index + 1
 *   20      1     11                    field type STRING
 *   21      2     1                     field id 1 (`s`)
 *   23      4     P                     string length
 *   27      P     payload               ASCII letters (a Thrift string is UTF-8)
 *   27+P    1     0                     field stop
 *
 * The reply has the same shape: type REPLY (2), the same seqid, field id 0
 * (`success`), the same string; so it is exactly as long as the request. A
 * reply of type EXCEPTION (3) or of any other shape, EOF or a reset is an
 * error: it is counted by kind, the first one is described, and the
 * connection is reopened (a benchmark that drops errors measures the wrong
 * thing).
 *
 * Requests go out with writev in two pieces: a 20-byte header per connection
 * (it carries the seqid) and an args body shared by all connections (the
 * payload may be 1 MiB and there may be hundreds of connections).
 *
 * Other forms (--protocol compact, --transport unframed; the defaults above
 * are unchanged): the same call in TCompactProtocol and/or without the frame
 * length. Compact's message header is
 *
 *   0x82  (type << 5) | 1  varint seqid  varint 4  "echo"
 *
 * (CALL 0x21, REPLY 0x41, EXCEPTION 0x61; varints are unsigned base-128,
 * least significant group first). The args are 0x18 (field delta 1, type
 * BINARY 8), varint P, payload, 0x00; the result is 0x08 0x00 (long form:
 * type 8, then field id 0 as a zigzag varint), varint P, payload, 0x00.
 * Either way the whole reply is known in advance: each connection keeps the
 * bytes it expects (its header, with its seqid, plus a result body shared by
 * all). Framed replies are read by their frame length and then compared;
 * unframed ones carry no length, so exactly the expected reply's length is
 * read and each byte compared as it arrives: a reply that differs (an
 * EXCEPTION, another seqid) is an error at the first byte that differs, and
 * the connection is reopened, since the end of an unexpected unframed reply
 * cannot be found without decoding it.
 *
 * Only calls that complete inside [start + warmup, start + warmup + duration)
 * count. Latencies are kept one per call (4 bytes each) and sorted at the end,
 * so the percentiles are exact rather than bucketed.
 *
 * Output: one JSON line on stdout. On stderr, the lines "loadgen: measuring"
 * and "loadgen: done" mark the measured window as it happens, so a caller can
 * sample the server's CPU time over exactly that window; other stderr lines
 * are diagnostics.
 *
 * TLS (built with -DLOADGEN_TLS and OpenSSL; `loadgen --features` says whether
 * this binary was): --tls-ca makes every connection TLS, verifying the
 * server's certificate against that CA and its address (--host); --tls-cert
 * and --tls-key present a client certificate (mutual TLS). Connections are
 * then nonblocking from connect() on, so that a server that handshakes one
 * connection at a time in its accept loop is never waiting for a client
 * stuck in a blocking connect(); connects and handshakes run in the same
 * epoll loop, and the clock starts once every connection has finished its
 * handshake (as plain connections are all connected before it starts).
 * Requests go out with SSL_write from one buffer per connection (TLS has no
 * scatter-gather write, and two writes would be two records); SSL_read and
 * SSL_write may each want the other direction (a TLS 1.3 ticket or key
 * update), so the connection waits for what OpenSSL asks for. No session is
 * ever reused: every handshake is a full one.
 *
 * --handshakes (TLS only): each connection repeats a cycle: connect, full
 * handshake, one echo call, close_notify, close. A cycle counts when its
 * reply has been checked; calls/s is then cycles/s (also given as
 * "handshakes_per_s") and the latencies are those of whole cycles.
 *
 * Build: gcc -O2 -Wall -Wextra -o loadgen loadgen.c
 *        gcc -O2 -Wall -Wextra -DLOADGEN_TLS -o loadgen loadgen.c -lssl -lcrypto
 * Usage: loadgen --port P [--host 127.0.0.1] [--connections N]
 *                [--payload BYTES] [--duration S] [--warmup S]
 *                [--protocol binary|compact] [--transport framed|unframed]
 *                [--tls-ca FILE [--tls-cert FILE --tls-key FILE] [--handshakes]]
 *        loadgen --features        one JSON line: {"tls":true|false,...}
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#ifdef LOADGEN_TLS
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#endif

#define HEAD_LEN 20           /* frame length .. seqid, framed binary */
/* The longest message header of any form: framed binary's. Compact's is at
 * most 4 + 2 + 5 (seqid varint) + 1 + 4 = 16. */
#define HEAD_MAX 20
#define ARGS_FIXED_LEN 8      /* field header (3) + string length (4) + stop (1) */
#define VERSION_1 0x80010000u
#define VERSION_MASK 0xffff0000u
#define MSG_CALL 1
#define MSG_REPLY 2
#define MSG_EXCEPTION 3
#define T_STRING 11
#define COMPACT_ID 0x82
#define COMPACT_VERSION 1
#define COMPACT_BINARY 8      /* compact's type for STRING and BINARY */
/* Thrift's default maximum frame size: the largest request we build, and the
 * largest reply we buffer when it is not the size we expect (an exception
 * carries a message of its own length). */
#define MAX_FRAME 16384000u
/* A connection that keeps failing is retired rather than reopened forever. */
#define MAX_RECONNECTS 100
#define MAX_EVENTS 256
/* TLS: seconds the connects and handshakes before the clock may take. A
 * server that handshakes serially and drops SYNs while its backlog is full
 * takes a while with hundreds of connections, but not this long. */
#define TLS_SETUP_LIMIT_S 60

enum err_kind { E_EXCEPTION, E_BAD_REPLY, E_EOF, E_IO, E_CONNECT, E_TLS, E_KINDS };
static const char *const err_names[E_KINDS] = {
    "exception", "bad_reply", "eof", "io", "connect", "tls",
};

/* Plain connections are only ever SENDING, RECEIVING or DEAD. TLS ones start
 * CONNECTING, then HANDSHAKING; READY is a TLS connection set up before the
 * clock starts, waiting for it. */
enum conn_state { C_CONNECTING, C_HANDSHAKING, C_READY, C_SENDING, C_RECEIVING, C_DEAD };

struct conn {
    int fd;
    int index;
    enum conn_state state;
    uint8_t head[HEAD_MAX]; /* the request's bytes before the shared args body */
    size_t head_len;
    size_t req_len;     /* head_len + g_body_len */
    uint8_t rhead[HEAD_MAX]; /* the expected reply's bytes before g_rbody */
    size_t rhead_len;
    size_t reply_len;   /* rhead_len + g_rbody_len */
    size_t sent;        /* bytes of the request written so far */
    uint8_t *rbuf;      /* reply buffer, at least one request long */
    size_t rcap;
    size_t rlen;        /* bytes of the reply read so far */
    uint32_t events;    /* the epoll events registered */
    int reconnects;
    uint64_t t_send_ns; /* when this request started */
    uint64_t t_open_ns; /* --handshakes: when this cycle's connect started */
#ifdef LOADGEN_TLS
    SSL *ssl;
    uint8_t *req;       /* head + body in one buffer, for SSL_write */
#endif
};

struct stats {
    uint32_t *lat_us;   /* one per call completed in the window */
    size_t n, cap;
    uint64_t calls_total; /* good replies, warm-up included */
    uint64_t errors[E_KINDS];
    char first_error[320];
};

static struct sockaddr_in g_addr;
static int g_epfd = -1;
static uint8_t *g_body;     /* args struct + stop, shared by all connections */
static size_t g_body_len;
static size_t g_req_len;    /* HEAD_LEN + g_body_len (framed binary) */
static uint8_t *g_rbody;    /* the expected result struct + stop (other forms) */
static size_t g_rbody_len;
static int g_compact;       /* --protocol compact */
static int g_unframed;      /* --transport unframed */
static size_t g_payload;
static int g_alive;         /* connections not retired */
static int g_tls;           /* --tls-ca given */
static int g_handshakes;    /* --handshakes */
static int g_setup;         /* TLS: still before the clock (connections wait READY) */
static int g_setup_pending; /* TLS: connections not yet READY or DEAD during setup */
#ifdef LOADGEN_TLS
static SSL_CTX *g_ctx;
static char g_tls_version[32], g_tls_cipher[64];
#endif

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t get_u32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void die(const char *what)
{
    fprintf(stderr, "loadgen: %s: %s\n", what, strerror(errno));
    exit(2);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "loadgen: out of memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}

/* Errors count whenever they happen, warm-up included: a server that fails
 * only while warming up still fails. */
static void record_error(struct stats *st, enum err_kind kind, const struct conn *c,
                         const char *detail)
{
    st->errors[kind]++;
    if (!st->first_error[0])
        snprintf(st->first_error, sizeof st->first_error, "connection %d: %s: %s",
                 c->index, err_names[kind], detail);
}

static void record_latency(struct stats *st, uint64_t ns)
{
    if (st->n == st->cap) {
        st->cap = st->cap ? st->cap * 2 : 65536;
        uint32_t *p = realloc(st->lat_us, st->cap * sizeof *p);
        if (!p) {
            fprintf(stderr, "loadgen: out of memory for latencies\n");
            exit(2);
        }
        st->lat_us = p;
    }
    uint64_t us = ns / 1000u;
    st->lat_us[st->n++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static void set_events(struct conn *c, uint32_t events)
{
    if (c->events == events)
        return;
    struct epoll_event ev = {.events = events, .data.ptr = c};
    if (epoll_ctl(g_epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
        die("epoll_ctl(MOD)");
    c->events = events;
}

static void set_want_out(struct conn *c, int want_out)
{
    set_events(c, EPOLLIN | (want_out ? EPOLLOUT : 0u));
}

/* Plain: blocking connect (not timed: it happens before the run, or after an
 * error), then nonblocking. TLS: nonblocking connect; the connection is
 * CONNECTING and the event loop carries on (see the header). Returns 0, or -1
 * with errno set. */
static int open_conn(struct conn *c)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (g_tls ? SOCK_NONBLOCK : 0), 0);
    if (fd < 0)
        die("socket");
    if (g_tls) {
        if (connect(fd, (struct sockaddr *)&g_addr, sizeof g_addr) < 0 && errno != EINPROGRESS) {
            int saved = errno;
            close(fd);
            errno = saved;
            return -1;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->fd = fd;
        c->state = C_CONNECTING;
        c->events = EPOLLOUT; /* writable = connected (or failed: SO_ERROR says) */
        struct epoll_event ev = {.events = c->events, .data.ptr = c};
        if (epoll_ctl(g_epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
            die("epoll_ctl(ADD)");
        return 0;
    }
    if (connect(fd, (struct sockaddr *)&g_addr, sizeof g_addr) < 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    /* Each request is one write followed by a wait for its reply: Nagle's
     * algorithm could only add delay. */
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
        die("fcntl(O_NONBLOCK)");
    c->fd = fd;
    c->events = EPOLLIN;
    struct epoll_event ev = {.events = c->events, .data.ptr = c};
    if (epoll_ctl(g_epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
        die("epoll_ctl(ADD)");
    return 0;
}

/* `polite`: a TLS connection in step sends close_notify first (one attempt,
 * not waited for), as a client ending a session does; after an error it is
 * just closed. */
static void close_conn(struct conn *c, int polite)
{
#ifdef LOADGEN_TLS
    if (c->ssl) {
        if (polite && SSL_is_init_finished(c->ssl))
            SSL_shutdown(c->ssl);
        SSL_free(c->ssl);
        c->ssl = NULL;
    }
#endif
    (void)polite;
    if (c->fd >= 0)
        close(c->fd); /* also removes it from the epoll set */
    c->fd = -1;
}

/* Writes as much of the request as the socket takes. Returns 0 (done or
 * would block) or -1 on an I/O error (recorded). */
static int pump_send_tls(struct conn *c, struct stats *st);

static int pump_send(struct conn *c, struct stats *st)
{
    if (g_tls)
        return pump_send_tls(c, st);
    while (c->sent < c->req_len) {
        struct iovec iov[2];
        int n = 0;
        if (c->sent < c->head_len) {
            iov[n].iov_base = c->head + c->sent;
            iov[n++].iov_len = c->head_len - c->sent;
            iov[n].iov_base = g_body;
            iov[n++].iov_len = g_body_len;
        } else {
            size_t off = c->sent - c->head_len;
            iov[n].iov_base = g_body + off;
            iov[n++].iov_len = g_body_len - off;
        }
        ssize_t w = writev(c->fd, iov, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                set_want_out(c, 1);
                return 0;
            }
            record_error(st, E_IO, c, strerror(errno));
            return -1;
        }
        c->sent += (size_t)w;
    }
    set_want_out(c, 0);
    c->state = C_RECEIVING;
    return 0;
}

static void start_request(struct conn *c, struct stats *st, uint64_t t)
{
    c->state = C_SENDING;
    c->sent = 0;
    c->rlen = 0;
    c->t_send_ns = t;
    if (pump_send(c, st) < 0)
        c->state = C_DEAD; /* caller reopens */
}

static ssize_t read_some(struct conn *c, struct stats *st, void *buf, size_t want);

/* Whether p[0..len) are the expected reply's bytes [off, off + len). */
static int expected_at(const struct conn *c, size_t off, const uint8_t *p, size_t len)
{
    if (off < c->rhead_len) {
        size_t k = c->rhead_len - off < len ? c->rhead_len - off : len;
        if (memcmp(p, c->rhead + off, k) != 0)
            return 0;
        p += k;
        off += k;
        len -= k;
    }
    return len == 0 || memcmp(p, g_rbody + (off - c->rhead_len), len) == 0;
}

/* A compact varint32 at b[*off..n). Returns 1 (read; *off moved past it), 0 when
 * it runs past n, -1 when it is longer than 5 bytes. */
static int read_varint(const uint8_t *b, size_t n, size_t *off, uint32_t *out)
{
    uint32_t v = 0;
    for (unsigned shift = 0; shift < 35; shift += 7) {
        if (*off >= n)
            return 0;
        uint8_t byte = b[(*off)++];
        v |= (uint32_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *out = v;
            return 1;
        }
    }
    return -1;
}

static size_t put_varint(uint8_t *p, uint32_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

static int classify_reply(struct conn *c, struct stats *st, const uint8_t *m, size_t n,
                          int whole);

/* Unframed: reads no more than what is left of the expected reply (one call
 * outstanding: nothing else can follow it), comparing each read as it comes.
 * Returns 1 when the whole reply is in and matched, 0 when more is needed, -1
 * on error (recorded). */
static int pump_recv_unframed(struct conn *c, struct stats *st)
{
    for (;;) {
        ssize_t r = read_some(c, st, c->rbuf + c->rlen, c->reply_len - c->rlen);
        if (r == -2)
            return 0;     /* would block */
        if (r < 0)
            return -1;    /* recorded */
        if (r == 0) {
            record_error(st, E_EOF, c,
                         c->rlen ? "connection closed inside a reply" : "connection closed");
            return -1;
        }
        int same = expected_at(c, c->rlen, c->rbuf + c->rlen, (size_t)r);
        c->rlen += (size_t)r;
        if (!same) {
            classify_reply(c, st, c->rbuf, c->rlen, 0);
            return -1;
        }
        if (c->rlen == c->reply_len)
            return 1;
    }
}

/* Reads what is there. Returns 1 when a whole reply frame is in rbuf, 0 when
 * more is needed, -1 on error (recorded). */
static int pump_recv(struct conn *c, struct stats *st)
{
    if (g_unframed)
        return pump_recv_unframed(c, st);
    for (;;) {
        size_t want;
        if (c->rlen < 4) {
            /* One outstanding call: nothing can follow this reply, so read
             * as much as the expected reply in one go. */
            want = c->rcap - c->rlen;
        } else {
            uint32_t len = get_u32(c->rbuf);
            if (len > MAX_FRAME || len < 12) {
                char msg[64];
                snprintf(msg, sizeof msg, "reply frame length %u", len);
                record_error(st, E_BAD_REPLY, c, msg);
                return -1;
            }
            size_t total = 4 + (size_t)len;
            if (c->rlen > total) {
                record_error(st, E_BAD_REPLY, c, "bytes after the reply frame");
                return -1;
            }
            if (c->rlen == total)
                return 1;
            if (total > c->rcap) {
                uint8_t *p = realloc(c->rbuf, total);
                if (!p) {
                    fprintf(stderr, "loadgen: out of memory for a reply\n");
                    exit(2);
                }
                c->rbuf = p;
                c->rcap = total;
            }
            want = total - c->rlen;
        }
        ssize_t r = read_some(c, st, c->rbuf + c->rlen, want);
        if (r == -2)
            return 0;     /* would block */
        if (r < 0)
            return -1;    /* recorded */
        if (r == 0) {
            record_error(st, E_EOF, c,
                         c->rlen ? "connection closed inside a reply" : "connection closed");
            return -1;
        }
        c->rlen += (size_t)r;
        if (c->rlen >= 4) {
            uint32_t len = get_u32(c->rbuf);
            if (len <= MAX_FRAME && c->rlen == 4 + (size_t)len)
                return 1; /* skip the read that would only say EAGAIN */
        }
    }
}

/* Best effort: the message of a TApplicationException reply (field 1, string). */
static void exception_message(const uint8_t *b, size_t n, size_t off, char *out, size_t outn)
{
    snprintf(out, outn, "EXCEPTION reply");
    if (off + 7 > n || b[off] != T_STRING || b[off + 1] != 0 || b[off + 2] != 1)
        return;
    uint32_t len = get_u32(b + off + 3);
    if (len > n - off - 7)
        return;
    size_t k = len < outn - 20 ? len : outn - 20;
    snprintf(out, outn, "EXCEPTION reply: %.*s", (int)k, (const char *)b + off + 7);
}

/* The same for compact (field 1, BINARY, varint length). */
static void compact_exception_message(const uint8_t *b, size_t n, size_t off, char *out,
                                      size_t outn)
{
    snprintf(out, outn, "EXCEPTION reply");
    uint32_t len;
    if (off >= n || b[off] != (0x10 | COMPACT_BINARY))
        return;
    off++;
    if (read_varint(b, n, &off, &len) != 1 || len > n - off)
        return;
    size_t k = len < outn - 20 ? len : outn - 20;
    snprintf(out, outn, "EXCEPTION reply: %.*s", (int)k, (const char *)b + off);
}

/* Checks a complete reply against the request. Returns REPLY_OK, or
 * REPLY_EXCEPTION (recorded; the connection is still in step, as an exception
 * is a whole reply), or REPLY_BROKEN (recorded; the connection is not to be
 * trusted any more). */
enum { REPLY_OK, REPLY_EXCEPTION, REPLY_BROKEN };

/* A reply (other forms) that is not the expected bytes: records why, from as
 * much of its message header as m[0..n) holds. `whole`: m is the complete
 * message (framed), so an EXCEPTION reply to this call leaves the connection
 * in step. */
static int classify_reply(struct conn *c, struct stats *st, const uint8_t *m, size_t n,
                          int whole)
{
    int have_type = 0, have_head = 0, name_echo = 0;
    unsigned type = 0;
    uint32_t seqid = 0, name_len = 0;
    size_t fields = n;
    if (g_compact) {
        if ((n >= 1 && m[0] != COMPACT_ID) || (n >= 2 && (m[1] & 0x1f) != COMPACT_VERSION)) {
            record_error(st, E_BAD_REPLY, c, "not a compact-protocol message");
            return REPLY_BROKEN;
        }
        size_t off = 2;
        if (n >= 2) {
            have_type = 1;
            type = m[1] >> 5;
            if (read_varint(m, n, &off, &seqid) == 1 && read_varint(m, n, &off, &name_len) == 1 &&
                name_len <= n - off) {
                have_head = 1;
                name_echo = name_len == 4 && memcmp(m + off, "echo", 4) == 0;
                fields = off + name_len;
            }
        }
    } else if (n >= 4) {
        uint32_t ver = get_u32(m);
        if ((ver & VERSION_MASK) != VERSION_1) {
            record_error(st, E_BAD_REPLY, c, "not a strict binary-protocol message");
            return REPLY_BROKEN;
        }
        have_type = 1;
        type = ver & 0xffu;
        if (n >= 8) {
            name_len = get_u32(m + 4);
            if (name_len <= n - 8 && n - 8 - name_len >= 4) {
                have_head = 1;
                name_echo = name_len == 4 && memcmp(m + 8, "echo", 4) == 0;
                seqid = get_u32(m + 8 + name_len);
                fields = 12 + (size_t)name_len;
            }
        }
    }
    int ours = have_head && name_echo && seqid == (uint32_t)(c->index + 1);
    if (have_type && type == MSG_EXCEPTION) {
        char msg[160];
        if (g_compact)
            compact_exception_message(m, n, ours ? fields : n, msg, sizeof msg);
        else
            exception_message(m, n, ours ? fields : n, msg, sizeof msg);
        record_error(st, E_EXCEPTION, c, msg);
        return whole && ours ? REPLY_EXCEPTION : REPLY_BROKEN;
    }
    if (have_head && !name_echo)
        record_error(st, E_BAD_REPLY, c, "reply names another method");
    else if (have_head && !ours)
        record_error(st, E_BAD_REPLY, c, "reply has another seqid");
    else if (have_type && type != MSG_REPLY)
        record_error(st, E_BAD_REPLY, c, "message type is not REPLY");
    else
        record_error(st, E_BAD_REPLY, c, "reply is not the echoed string");
    return REPLY_BROKEN;
}

static int verify_binary_frame(struct conn *c, struct stats *st);

static int verify_reply(struct conn *c, struct stats *st)
{
    if (g_unframed)
        return REPLY_OK; /* pump_recv_unframed compared every byte as it came */
    if (!g_compact)
        return verify_binary_frame(c, st);
    if (c->rlen == c->reply_len && expected_at(c, 0, c->rbuf, c->rlen))
        return REPLY_OK;
    return classify_reply(c, st, c->rbuf + 4, c->rlen - 4, 1);
}

/* Framed binary, the default form: checked field by field. */
static int verify_binary_frame(struct conn *c, struct stats *st)
{
    const uint8_t *b = c->rbuf;
    size_t n = c->rlen;
    uint32_t ver = get_u32(b + 4);
    if ((ver & VERSION_MASK) != VERSION_1) {
        record_error(st, E_BAD_REPLY, c, "not a strict binary-protocol message");
        return REPLY_BROKEN;
    }
    uint32_t name_len = get_u32(b + 8);
    if (name_len != 4 || n < 20 || memcmp(b + 12, "echo", 4) != 0) {
        record_error(st, E_BAD_REPLY, c, "reply names another method");
        return REPLY_BROKEN;
    }
    if (get_u32(b + 16) != (uint32_t)(c->index + 1)) {
        record_error(st, E_BAD_REPLY, c, "reply has another seqid");
        return REPLY_BROKEN;
    }
    unsigned type = ver & 0xffu;
    if (type == MSG_EXCEPTION) {
        char msg[160];
        exception_message(b, n, 20, msg, sizeof msg);
        record_error(st, E_EXCEPTION, c, msg);
        return REPLY_EXCEPTION;
    }
    if (type != MSG_REPLY) {
        record_error(st, E_BAD_REPLY, c, "message type is not REPLY");
        return REPLY_BROKEN;
    }
    /* success: field 0, STRING, the same bytes; then stop. */
    if (n != g_req_len || b[20] != T_STRING || b[21] != 0 || b[22] != 0 ||
        get_u32(b + 23) != (uint32_t)g_payload || b[27 + g_payload] != 0) {
        record_error(st, E_BAD_REPLY, c, "reply is not the echoed string");
        return REPLY_BROKEN;
    }
    if (memcmp(b + 27, g_body + 7, g_payload) != 0) {
        record_error(st, E_BAD_REPLY, c, "echoed string differs from the one sent");
        return REPLY_BROKEN;
    }
    return REPLY_OK;
}

/* ------------------------------------------------------------------ TLS */

#ifdef LOADGEN_TLS
/* The reason OpenSSL gives for a failure, plus the certificate check's verdict
 * when that is what failed; the error queue is emptied either way, so a later
 * failure on another connection is not described with this one's reason. */
static void tls_reason(struct conn *c, int ret, char *out, size_t outn)
{
    int kind = SSL_get_error(c->ssl, ret);
    unsigned long e = ERR_get_error();
    if (e) {
        char buf[160];
        ERR_error_string_n(e, buf, sizeof buf);
        long v = SSL_get_verify_result(c->ssl);
        if (v != X509_V_OK)
            snprintf(out, outn, "%s (%s)", buf, X509_verify_cert_error_string(v));
        else
            snprintf(out, outn, "%s", buf);
    } else if (kind == SSL_ERROR_SYSCALL) {
        snprintf(out, outn, "%s", errno ? strerror(errno) : "connection closed by the server");
    } else if (kind == SSL_ERROR_ZERO_RETURN) {
        /* With SSL_OP_IGNORE_UNEXPECTED_EOF a bare EOF reads as this too. */
        snprintf(out, outn, SSL_is_init_finished(c->ssl) ? "connection closed by the server"
                                                         : "connection closed by the server "
                                                           "during the handshake");
    } else {
        snprintf(out, outn, "SSL_get_error %d", kind);
    }
    ERR_clear_error();
}

/* When OpenSSL's error `kind` means "wait for the socket", poll for what it
 * asked for and return 1; otherwise 0 (a real failure, or the end of the
 * stream). */
static int tls_wait(struct conn *c, int kind)
{
    if (kind == SSL_ERROR_WANT_READ) {
        set_events(c, EPOLLIN);
        return 1;
    }
    if (kind == SSL_ERROR_WANT_WRITE) {
        set_events(c, EPOLLOUT);
        return 1;
    }
    return 0;
}
#endif

/* Like read(2) for plain connections, SSL_read for TLS ones. Returns the
 * bytes read, 0 at the end of the stream, -2 when it would block (waiting for
 * whatever OpenSSL asked for), -1 on an error (recorded). */
static ssize_t read_some(struct conn *c, struct stats *st, void *buf, size_t want)
{
#ifdef LOADGEN_TLS
    if (g_tls) {
        size_t got = 0;
        int r = SSL_read_ex(c->ssl, buf, want, &got);
        if (r > 0) {
            set_events(c, EPOLLIN); /* a read that needed to write is done */
            return (ssize_t)got;
        }
        int kind = SSL_get_error(c->ssl, r);
        if (tls_wait(c, kind))
            return -2;
        if (kind == SSL_ERROR_ZERO_RETURN) {
            ERR_clear_error();
            return 0;
        }
        char why[240];
        tls_reason(c, r, why, sizeof why);
        record_error(st, kind == SSL_ERROR_SYSCALL ? E_IO : E_TLS, c, why);
        return -1;
    }
#endif
    for (;;) {
        ssize_t r = read(c->fd, buf, want);
        if (r >= 0)
            return r;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return -2;
        record_error(st, E_IO, c, strerror(errno));
        return -1;
    }
}

/* SSL_write of the rest of the request (partial writes enabled: `sent`
 * advances record by record; a write that would block is retried with the
 * same bytes, as OpenSSL requires). Returns 0 (done or would block) or -1 on
 * an error (recorded). */
static int pump_send_tls(struct conn *c, struct stats *st)
{
#ifdef LOADGEN_TLS
    while (c->sent < c->req_len) {
        size_t wrote = 0;
        int r = SSL_write_ex(c->ssl, c->req + c->sent, c->req_len - c->sent, &wrote);
        if (r > 0) {
            c->sent += wrote;
            continue;
        }
        int kind = SSL_get_error(c->ssl, r);
        if (tls_wait(c, kind))
            return 0;
        char why[240];
        tls_reason(c, r, why, sizeof why);
        record_error(st, kind == SSL_ERROR_SYSCALL ? E_IO : E_TLS, c, why);
        return -1;
    }
    set_events(c, EPOLLIN);
    c->state = C_RECEIVING;
    return 0;
#else
    (void)c;
    (void)st;
    return -1; /* unreachable: g_tls needs LOADGEN_TLS */
#endif
}

/* One step of a TLS connection's set-up: the connect's outcome, then the
 * handshake. Returns 1 when the handshake is done, 0 when waiting for the
 * socket, -1 on failure (recorded). */
static int tls_setup_step(struct conn *c, struct stats *st)
{
#ifdef LOADGEN_TLS
    if (c->state == C_CONNECTING) {
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
            err = errno;
        if (err) {
            record_error(st, E_CONNECT, c, strerror(err));
            return -1;
        }
        c->ssl = SSL_new(g_ctx);
        if (!c->ssl || !SSL_set_fd(c->ssl, c->fd)) {
            fprintf(stderr, "loadgen: SSL_new/SSL_set_fd failed\n");
            exit(2);
        }
        SSL_set_connect_state(c->ssl);
        c->state = C_HANDSHAKING;
    }
    int r = SSL_do_handshake(c->ssl);
    if (r == 1) {
        if (!g_tls_version[0]) {
            snprintf(g_tls_version, sizeof g_tls_version, "%s", SSL_get_version(c->ssl));
            snprintf(g_tls_cipher, sizeof g_tls_cipher, "%s", SSL_get_cipher_name(c->ssl));
        }
        return 1;
    }
    int kind = SSL_get_error(c->ssl, r);
    if (tls_wait(c, kind))
        return 0;
    char why[240];
    tls_reason(c, r, why, sizeof why);
    record_error(st, E_TLS, c, why);
    return -1;
#else
    (void)c;
    (void)st;
    return -1;
#endif
}

static void retire(struct conn *c)
{
    close_conn(c, 0);
    if (g_setup && (c->state == C_CONNECTING || c->state == C_HANDSHAKING))
        g_setup_pending--;
    c->state = C_DEAD;
    g_alive--;
}

/* After an error: drop the connection and open a new one, so one bad reply
 * does not end the run for this connection; give up after MAX_RECONNECTS.
 * Before the clock starts (TLS set-up), a failing connection is retired at
 * once, as a plain one whose connect fails is never counted. */
static void reopen(struct conn *c, struct stats *st)
{
    if (g_setup) {
        retire(c);
        return;
    }
    for (;;) {
        close_conn(c, 0);
        c->state = C_DEAD;
        if (++c->reconnects > MAX_RECONNECTS)
            break;
        c->t_open_ns = now_ns();
        if (open_conn(c) < 0) {
            record_error(st, E_CONNECT, c, strerror(errno));
            break;
        }
        if (g_tls)
            return; /* the event loop connects and handshakes it */
        start_request(c, st, now_ns());
        if (c->state != C_DEAD)
            return;
    }
    g_alive--;
}

/* --handshakes: the cycle ended well; close politely and start the next one. */
static void next_cycle(struct conn *c, struct stats *st, uint64_t t)
{
    close_conn(c, 1);
    c->state = C_DEAD;
    c->t_open_ns = t;
    if (open_conn(c) < 0) {
        record_error(st, E_CONNECT, c, strerror(errno));
        reopen(c, st);
    }
}

/* Everything one epoll event means for a TLS connection. */
static void on_tls_event(struct conn *c, uint32_t ev, struct stats *st, uint64_t t_measure,
                         uint64_t t_end)
{
    switch (c->state) {
    case C_DEAD:
        return;
    case C_READY:
        /* Nothing is registered but errors: the server gave up on it while
         * the others were still handshaking. A TLS 1.3 server refusing the
         * client's certificate does that after the client's side of the
         * handshake is done: read, so that its alert is the error recorded. */
        if (ev & (EPOLLERR | EPOLLHUP)) {
            uint8_t byte;
            ssize_t r = read_some(c, st, &byte, 1);
            if (r == -2) {
                set_events(c, 0);
                return;
            }
            if (r >= 0)
                record_error(st, E_EOF, c, r ? "data from the server before any request"
                                             : "closed by the server before the clock started");
            retire(c);
        }
        return;
    case C_CONNECTING:
    case C_HANDSHAKING: {
        int r = tls_setup_step(c, st);
        if (r < 0) {
            reopen(c, st);
            return;
        }
        if (r == 0)
            return;
        if (g_setup) {
            /* Wait for the clock with nothing registered: a TLS 1.3 server's
             * session tickets arriving now would make EPOLLIN fire for
             * nothing until then. */
            set_events(c, 0);
            c->state = C_READY;
            g_setup_pending--;
            return;
        }
        start_request(c, st, now_ns());
        if (c->state == C_DEAD)
            reopen(c, st);
        return;
    }
    case C_SENDING:
        if (pump_send(c, st) < 0)
            reopen(c, st);
        return; /* the reply is not there yet: wait for EPOLLIN */
    case C_RECEIVING:
        break;
    }
    int r = pump_recv(c, st);
    if (r == 0)
        return;
    int verdict = r > 0 ? verify_reply(c, st) : REPLY_BROKEN;
    if (verdict == REPLY_BROKEN) {
        reopen(c, st);
        return;
    }
    uint64_t t = now_ns();
    if (verdict == REPLY_OK) {
        st->calls_total++;
        if (t >= t_measure && t < t_end)
            record_latency(st, t - (g_handshakes ? c->t_open_ns : c->t_send_ns));
    }
    if (g_handshakes) {
        next_cycle(c, st, t);
        return;
    }
    start_request(c, st, t);
    if (c->state == C_DEAD)
        reopen(c, st);
}

#ifdef LOADGEN_TLS
static void tls_init(const char *ca, const char *cert, const char *key, const char *host)
{
    g_ctx = SSL_CTX_new(TLS_client_method());
    if (!g_ctx) {
        fprintf(stderr, "loadgen: SSL_CTX_new failed\n");
        exit(2);
    }
    SSL_CTX_set_min_proto_version(g_ctx, TLS1_2_VERSION);
    /* Every handshake a full one: no client-side session cache, and no
     * session is ever handed to SSL_set_session. */
    SSL_CTX_set_session_cache_mode(g_ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_mode(g_ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    /* A server closing without close_notify is an EOF we count, like a plain one. */
    SSL_CTX_set_options(g_ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    if (SSL_CTX_load_verify_locations(g_ctx, ca, NULL) != 1) {
        fprintf(stderr, "loadgen: cannot load the CA certificates in --tls-ca %s\n", ca);
        exit(64);
    }
    SSL_CTX_set_verify(g_ctx, SSL_VERIFY_PEER, NULL);
    /* The server's certificate must name the address connected to. */
    if (X509_VERIFY_PARAM_set1_ip_asc(SSL_CTX_get0_param(g_ctx), host) != 1) {
        fprintf(stderr, "loadgen: --host %s is not an IP address to check the certificate against\n",
                host);
        exit(64);
    }
    if (cert) {
        if (SSL_CTX_use_certificate_chain_file(g_ctx, cert) != 1) {
            fprintf(stderr, "loadgen: cannot load the client certificate --tls-cert %s\n", cert);
            exit(64);
        }
        if (SSL_CTX_use_PrivateKey_file(g_ctx, key, SSL_FILETYPE_PEM) != 1 ||
            SSL_CTX_check_private_key(g_ctx) != 1) {
            fprintf(stderr, "loadgen: --tls-key %s is not the key of --tls-cert %s\n", key, cert);
            exit(64);
        }
    }
}
#endif

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of a sorted array. */
static uint32_t pct(const uint32_t *v, size_t n, double p)
{
    if (!n)
        return 0;
    size_t rank = (size_t)(p * (double)n + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return v[rank - 1];
}

static void json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20 || ch > 0x7e)
            putchar('?');
        else
            putchar(ch);
    }
    putchar('"');
}

/* The other forms' args and expected result bodies (framed binary's args are
 * g_body as built in main; binary's args are kept for unframed binary). */
static void build_other_bodies(void)
{
    const uint8_t *payload = g_body + 7;
    uint8_t len[5];
    size_t len_n = put_varint(len, (uint32_t)g_payload);
    if (g_compact) {
        /* args: 0x18 varint P payload 0x00 */
        uint8_t *body = xmalloc(1 + len_n + g_payload + 1);
        size_t k = 0;
        body[k++] = 0x10 | COMPACT_BINARY;
        memcpy(body + k, len, len_n);
        k += len_n;
        memcpy(body + k, payload, g_payload);
        k += g_payload;
        body[k++] = 0;
        free(g_body);
        g_body = body;
        g_body_len = k;
        payload = g_body + 1 + len_n;
        /* result: 0x08 0x00 varint P payload 0x00 */
        g_rbody = xmalloc(2 + len_n + g_payload + 1);
        k = 0;
        g_rbody[k++] = COMPACT_BINARY;
        g_rbody[k++] = 0; /* field id 0, zigzag */
        memcpy(g_rbody + k, len, len_n);
        k += len_n;
        memcpy(g_rbody + k, payload, g_payload);
        k += g_payload;
        g_rbody[k++] = 0;
        g_rbody_len = k;
    } else {
        /* Binary: the result is the args with field id 0 instead of 1. */
        g_rbody = xmalloc(g_body_len);
        memcpy(g_rbody, g_body, g_body_len);
        g_rbody[2] = 0;
        g_rbody_len = g_body_len;
    }
}

/* The bytes of a message of the other forms before its struct (`body_len`
 * bytes): the frame length when framed, then the message header. Returns
 * their count (at most HEAD_MAX). */
static size_t other_head(uint8_t *out, unsigned type, uint32_t seqid, size_t body_len)
{
    size_t k = g_unframed ? 0 : 4;
    if (g_compact) {
        out[k++] = COMPACT_ID;
        out[k++] = (uint8_t)((type << 5) | COMPACT_VERSION);
        k += put_varint(out + k, seqid);
        k += put_varint(out + k, 4);
    } else {
        put_u32(out + k, VERSION_1 | type);
        put_u32(out + k + 4, 4);
        k += 8;
    }
    memcpy(out + k, "echo", 4);
    k += 4;
    if (!g_compact) {
        put_u32(out + k, seqid);
        k += 4;
    }
    if (!g_unframed)
        put_u32(out, (uint32_t)(k - 4 + body_len));
    return k;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: loadgen --port P [--host 127.0.0.1] [--connections N] [--payload BYTES]\n"
            "               [--duration SECONDS] [--warmup SECONDS]\n"
            "               [--protocol binary|compact] [--transport framed|unframed]\n"
            "               [--tls-ca FILE [--tls-cert FILE --tls-key FILE] [--handshakes]]\n"
            "       loadgen --features\n");
    exit(64);
}

/* What this binary can do, for bench_servers.py to decide what to run. */
static int print_features(void)
{
#ifdef LOADGEN_TLS
    printf("{\"tls\":true,\"openssl\":");
    json_string(OpenSSL_version(OPENSSL_VERSION));
    printf("}\n");
#else
    printf("{\"tls\":false,\"openssl\":null}\n");
#endif
    return 0;
}

int main(int argc, char **argv)
{
    const char *host = "127.0.0.1";
    const char *tls_ca = NULL, *tls_cert = NULL, *tls_key = NULL;
    long port = -1, nconn = 1, payload = 16;
    double duration = 5.0, warmup = 1.0;
    enum { O_TLS_CA = 256, O_TLS_CERT, O_TLS_KEY, O_HANDSHAKES, O_FEATURES, O_PROTOCOL,
           O_TRANSPORT };
    static const struct option opts[] = {
        {"host", required_argument, 0, 'h'},
        {"port", required_argument, 0, 'p'},
        {"connections", required_argument, 0, 'c'},
        {"payload", required_argument, 0, 's'},
        {"duration", required_argument, 0, 'd'},
        {"warmup", required_argument, 0, 'w'},
        {"tls-ca", required_argument, 0, O_TLS_CA},
        {"tls-cert", required_argument, 0, O_TLS_CERT},
        {"tls-key", required_argument, 0, O_TLS_KEY},
        {"handshakes", no_argument, 0, O_HANDSHAKES},
        {"features", no_argument, 0, O_FEATURES},
        {"protocol", required_argument, 0, O_PROTOCOL},
        {"transport", required_argument, 0, O_TRANSPORT},
        {0, 0, 0, 0},
    };
    int opt;
    while ((opt = getopt_long(argc, argv, "h:p:c:s:d:w:", opts, NULL)) != -1) {
        switch (opt) {
        case 'h': host = optarg; break;
        case 'p': port = strtol(optarg, NULL, 10); break;
        case 'c': nconn = strtol(optarg, NULL, 10); break;
        case 's': payload = strtol(optarg, NULL, 10); break;
        case 'd': duration = strtod(optarg, NULL); break;
        case 'w': warmup = strtod(optarg, NULL); break;
        case O_TLS_CA: tls_ca = optarg; break;
        case O_TLS_CERT: tls_cert = optarg; break;
        case O_TLS_KEY: tls_key = optarg; break;
        case O_HANDSHAKES: g_handshakes = 1; break;
        case O_FEATURES: return print_features();
        case O_PROTOCOL:
            if (strcmp(optarg, "binary") != 0 && strcmp(optarg, "compact") != 0) {
                fprintf(stderr, "loadgen: --protocol must be binary or compact, not %s\n", optarg);
                return 64;
            }
            g_compact = strcmp(optarg, "compact") == 0;
            break;
        case O_TRANSPORT:
            if (strcmp(optarg, "framed") != 0 && strcmp(optarg, "unframed") != 0) {
                fprintf(stderr, "loadgen: --transport must be framed or unframed, not %s\n",
                        optarg);
                return 64;
            }
            g_unframed = strcmp(optarg, "unframed") == 0;
            break;
        default: usage();
        }
    }
    if (optind != argc || port <= 0 || port > 65535 || nconn < 1 || nconn > 60000 ||
        payload < 0 || (size_t)payload > MAX_FRAME - 28 || !(duration > 0) || warmup < 0)
        usage();
    if ((tls_cert == NULL) != (tls_key == NULL) || (tls_cert && !tls_ca)) {
        fprintf(stderr, "loadgen: --tls-cert and --tls-key go together, and with --tls-ca\n");
        return 64;
    }
    if (g_handshakes && !tls_ca) {
        fprintf(stderr, "loadgen: --handshakes measures TLS handshakes and needs --tls-ca\n");
        return 64;
    }
    g_tls = tls_ca != NULL;
#ifndef LOADGEN_TLS
    if (g_tls) {
        fprintf(stderr, "loadgen: this loadgen was built without TLS (OpenSSL headers were "
                        "missing: apt-get install libssl-dev, then rebuild)\n");
        return 69;
    }
#endif

    signal(SIGPIPE, SIG_IGN); /* a closed peer is an error we count, not a death */
    memset(&g_addr, 0, sizeof g_addr);
    g_addr.sin_family = AF_INET;
    g_addr.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &g_addr.sin_addr) != 1) {
        fprintf(stderr, "loadgen: --host must be an IPv4 address, not %s\n", host);
        return 64;
    }
#ifdef LOADGEN_TLS
    if (g_tls)
        tls_init(tls_ca, tls_cert, tls_key, host);
#endif
    /* One descriptor per connection: raise the soft limit as far as allowed. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)nconn + 16) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }

    g_payload = (size_t)payload;
    g_body_len = ARGS_FIXED_LEN + g_payload;
    g_req_len = HEAD_LEN + g_body_len;
    g_body = xmalloc(g_body_len);
    g_body[0] = T_STRING;
    g_body[1] = 0;
    g_body[2] = 1;
    put_u32(g_body + 3, (uint32_t)g_payload);
    for (size_t i = 0; i < g_payload; i++)
        g_body[7 + i] = (uint8_t)('a' + i % 26);
    g_body[7 + g_payload] = 0;
    if (g_compact || g_unframed)
        build_other_bodies();

    g_epfd = epoll_create1(EPOLL_CLOEXEC);
    if (g_epfd < 0)
        die("epoll_create1");

    struct stats st;
    memset(&st, 0, sizeof st);
    struct conn *conns = calloc((size_t)nconn, sizeof *conns);
    if (!conns)
        die("calloc");
    const uint64_t t_setup = now_ns();
    for (int i = 0; i < nconn; i++) {
        struct conn *c = &conns[i];
        c->index = i;
        c->fd = -1;
        c->state = C_DEAD;
        if (g_compact || g_unframed) {
            c->head_len = other_head(c->head, MSG_CALL, (uint32_t)(i + 1), g_body_len);
            c->rhead_len = other_head(c->rhead, MSG_REPLY, (uint32_t)(i + 1), g_rbody_len);
            c->req_len = c->head_len + g_body_len;
            c->reply_len = c->rhead_len + g_rbody_len;
        } else {
            put_u32(c->head, (uint32_t)(g_req_len - 4));
            put_u32(c->head + 4, VERSION_1 | MSG_CALL);
            put_u32(c->head + 8, 4);
            memcpy(c->head + 12, "echo", 4);
            put_u32(c->head + 16, (uint32_t)(i + 1));
            c->head_len = HEAD_LEN;
            c->req_len = g_req_len;
            c->reply_len = g_req_len; /* verify_binary_frame checks the reply field by field */
        }
        c->rcap = c->reply_len;
        c->rbuf = xmalloc(c->rcap);
#ifdef LOADGEN_TLS
        if (g_tls) {
            c->req = xmalloc(c->req_len);
            memcpy(c->req, c->head, c->head_len);
            memcpy(c->req + c->head_len, g_body, g_body_len);
        }
#endif
        if (g_handshakes)
            continue; /* every cycle, the first included, is timed */
        if (open_conn(c) < 0) {
            record_error(&st, E_CONNECT, c, strerror(errno));
            continue;
        }
        if (!g_tls)
            c->state = C_SENDING;
        else
            g_setup_pending++;
        g_alive++;
    }
    if (g_tls && !g_handshakes) {
        /* Connects and handshakes, all at once, before the clock. */
        struct epoll_event events[MAX_EVENTS];
        const uint64_t limit = now_ns() + (uint64_t)TLS_SETUP_LIMIT_S * 1000000000u;
        g_setup = 1;
        while (g_setup_pending > 0 && now_ns() < limit) {
            int n = epoll_wait(g_epfd, events, MAX_EVENTS, 100);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                die("epoll_wait");
            }
            for (int k = 0; k < n; k++)
                on_tls_event(events[k].data.ptr, events[k].events, &st, UINT64_MAX, UINT64_MAX);
        }
        for (int i = 0; i < nconn; i++) {
            struct conn *c = &conns[i];
            if (c->state == C_CONNECTING || c->state == C_HANDSHAKING) {
                record_error(&st, E_CONNECT, c, "TLS connect and handshake not done within "
                                                "the set-up limit");
                retire(c);
            }
        }
        g_setup = 0;
    }

    struct rusage ru0;
    getrusage(RUSAGE_SELF, &ru0);
    const uint64_t t0 = now_ns();
    /* Connecting is not timed, but a server whose accept backlog overflows
     * makes it slow (SYN retransmits after 1 s); say so in the output. */
    const double setup_s = (double)(t0 - t_setup) / 1e9;
    const uint64_t t_measure = t0 + (uint64_t)(warmup * 1e9);
    const uint64_t t_end = t_measure + (uint64_t)(duration * 1e9);
    for (int i = 0; i < nconn; i++) {
        struct conn *c = &conns[i];
        if (g_handshakes) {
            c->t_open_ns = t0;
            if (open_conn(c) < 0)
                record_error(&st, E_CONNECT, c, strerror(errno));
            else
                g_alive++;
        } else if (c->state != C_DEAD) {
            start_request(c, &st, t0);
            if (c->state == C_DEAD)
                reopen(c, &st);
        }
    }

    struct epoll_event events[MAX_EVENTS];
    int measuring = 0;
    uint64_t t_cpu0 = t0;
    for (;;) {
        uint64_t now = now_ns();
        if (now >= t_end || !g_alive)
            break;
        if (!measuring && now >= t_measure) {
            measuring = 1;
            fputs("loadgen: measuring\n", stderr); /* stderr is unbuffered */
            /* Our own CPU use is reported over the measured window too. */
            getrusage(RUSAGE_SELF, &ru0);
            t_cpu0 = now;
        }
        uint64_t left_ms = (t_end - now) / 1000000u + 1;
        int n = epoll_wait(g_epfd, events, MAX_EVENTS, left_ms > 100 ? 100 : (int)left_ms);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die("epoll_wait");
        }
        for (int k = 0; k < n; k++) {
            struct conn *c = events[k].data.ptr;
            uint32_t ev = events[k].events;
            if (c->state == C_DEAD)
                continue;
            if (g_tls) {
                on_tls_event(c, ev, &st, t_measure, t_end);
                continue;
            }
            if (c->state == C_SENDING && (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
                if (pump_send(c, &st) < 0) {
                    reopen(c, &st);
                    continue;
                }
            }
            if (!(ev & (EPOLLIN | EPOLLERR | EPOLLHUP)))
                continue;
            int r = pump_recv(c, &st);
            if (r == 0)
                continue;
            if (r > 0 && c->state == C_SENDING) {
                record_error(&st, E_BAD_REPLY, c, "reply before the request was sent");
                r = -1;
            }
            int verdict = r > 0 ? verify_reply(c, &st) : REPLY_BROKEN;
            if (verdict != REPLY_BROKEN) {
                uint64_t t = now_ns();
                if (verdict == REPLY_OK) {
                    st.calls_total++;
                    if (t >= t_measure && t < t_end)
                        record_latency(&st, t - c->t_send_ns);
                }
                start_request(c, &st, t);
                if (c->state != C_DEAD)
                    continue;
            }
            reopen(c, &st);
        }
    }
    const uint64_t t_stop = now_ns();
    fputs("loadgen: done\n", stderr);
    struct rusage ru1;
    getrusage(RUSAGE_SELF, &ru1);

    if (st.n) /* no calls: no array, and qsort(NULL, 0) is undefined */
        qsort(st.lat_us, st.n, sizeof *st.lat_us, cmp_u32);
    double sum = 0;
    for (size_t i = 0; i < st.n; i++)
        sum += st.lat_us[i];
    uint64_t errors = 0;
    for (int k = 0; k < E_KINDS; k++)
        errors += st.errors[k];
    double user = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) +
                  (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) / 1e6;
    double sys = (double)(ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
                 (double)(ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) / 1e6;
    double wall = (double)(t_stop - t_cpu0) / 1e9;

    printf("{\"connections\":%ld,\"payload_bytes\":%zu,\"warmup_s\":%.3f,\"duration_s\":%.3f,"
           "\"calls\":%zu,\"calls_total\":%llu,\"calls_per_s\":%.1f,\"mb_per_s\":%.3f,"
           "\"latency_us\":{\"p50\":%u,\"p90\":%u,\"p99\":%u,\"p999\":%u,\"max\":%u,\"mean\":%.1f},"
           "\"errors\":%llu,\"error_kinds\":{",
           nconn, g_payload, warmup, duration, st.n, (unsigned long long)st.calls_total,
           (double)st.n / duration, (double)st.n * (double)g_payload / duration / 1e6,
           pct(st.lat_us, st.n, 0.50), pct(st.lat_us, st.n, 0.90), pct(st.lat_us, st.n, 0.99),
           pct(st.lat_us, st.n, 0.999), st.n ? st.lat_us[st.n - 1] : 0,
           st.n ? sum / (double)st.n : 0.0, (unsigned long long)errors);
    for (int k = 0; k < E_KINDS; k++)
        printf("%s\"%s\":%llu", k ? "," : "", err_names[k], (unsigned long long)st.errors[k]);
    printf("},\"first_error\":");
    json_string(st.first_error);
    printf(",\"connections_alive\":%d,\"setup_s\":%.3f,\"cpu_user_s\":%.3f,\"cpu_sys_s\":%.3f,"
           "\"wall_s\":%.3f,\"cpu_util\":%.3f,\"mode\":\"%s\",\"protocol\":\"%s\","
           "\"transport\":\"%s\",\"handshakes_per_s\":",
           g_alive, setup_s, user, sys, wall, wall > 0 ? (user + sys) / wall : 0.0,
           g_handshakes ? "handshakes" : "calls", g_compact ? "compact" : "binary",
           g_unframed ? "unframed" : "framed");
    /* Each cycle is one full handshake and one call. */
    if (g_handshakes)
        printf("%.1f", (double)st.n / duration);
    else
        printf("null");
    printf(",\"tls\":");
#ifdef LOADGEN_TLS
    if (g_tls) {
        printf("{\"version\":");
        json_string(g_tls_version);
        printf(",\"cipher\":");
        json_string(g_tls_cipher);
        printf("}");
    } else
#endif
        printf("null");
    printf("}\n");
    fflush(stdout);

    for (int i = 0; i < nconn; i++) {
        close_conn(&conns[i], 1);
        free(conns[i].rbuf);
#ifdef LOADGEN_TLS
        free(conns[i].req);
#endif
    }
    free(conns);
    free(g_body);
    free(g_rbody);
    free(st.lat_us);
    close(g_epfd);
#ifdef LOADGEN_TLS
    if (g_ctx)
        SSL_CTX_free(g_ctx);
#endif
    return 0;
}
