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
 * Only calls that complete inside [start + warmup, start + warmup + duration)
 * count. Latencies are kept one per call (4 bytes each) and sorted at the end,
 * so the percentiles are exact rather than bucketed.
 *
 * Output: one JSON line on stdout. On stderr, the lines "loadgen: measuring"
 * and "loadgen: done" mark the measured window as it happens, so a caller can
 * sample the server's CPU time over exactly that window; other stderr lines
 * are diagnostics.
 *
 * Build: gcc -O2 -Wall -Wextra -o loadgen loadgen.c
 * Usage: loadgen --port P [--host 127.0.0.1] [--connections N]
 *                [--payload BYTES] [--duration S] [--warmup S]
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

#define HEAD_LEN 20           /* frame length .. seqid */
#define ARGS_FIXED_LEN 8      /* field header (3) + string length (4) + stop (1) */
#define VERSION_1 0x80010000u
#define VERSION_MASK 0xffff0000u
#define MSG_CALL 1
#define MSG_REPLY 2
#define MSG_EXCEPTION 3
#define T_STRING 11
/* Thrift's default maximum frame size: the largest request we build, and the
 * largest reply we buffer when it is not the size we expect (an exception
 * carries a message of its own length). */
#define MAX_FRAME 16384000u
/* A connection that keeps failing is retired rather than reopened forever. */
#define MAX_RECONNECTS 100
#define MAX_EVENTS 256

enum err_kind { E_EXCEPTION, E_BAD_REPLY, E_EOF, E_IO, E_CONNECT, E_KINDS };
static const char *const err_names[E_KINDS] = {
    "exception", "bad_reply", "eof", "io", "connect",
};

enum conn_state { C_SENDING, C_RECEIVING, C_DEAD };

struct conn {
    int fd;
    int index;
    enum conn_state state;
    uint8_t head[HEAD_LEN];
    size_t sent;        /* bytes of the request written so far */
    uint8_t *rbuf;      /* reply buffer, at least one request long */
    size_t rcap;
    size_t rlen;        /* bytes of the reply read so far */
    int want_out;       /* EPOLLOUT is registered */
    int reconnects;
    uint64_t t_send_ns; /* when this request started */
};

struct stats {
    uint32_t *lat_us;   /* one per call completed in the window */
    size_t n, cap;
    uint64_t calls_total; /* good replies, warm-up included */
    uint64_t errors[E_KINDS];
    char first_error[200];
};

static struct sockaddr_in g_addr;
static int g_epfd = -1;
static uint8_t *g_body;     /* args struct + stop, shared by all connections */
static size_t g_body_len;
static size_t g_req_len;    /* HEAD_LEN + g_body_len */
static size_t g_payload;
static int g_alive;         /* connections not retired */

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

static void set_want_out(struct conn *c, int want_out)
{
    if (c->want_out == want_out)
        return;
    struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0u), .data.ptr = c};
    if (epoll_ctl(g_epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
        die("epoll_ctl(MOD)");
    c->want_out = want_out;
}

/* Blocking connect (not timed: it happens before the run, or after an error),
 * then nonblocking. Returns 0, or -1 with errno set. */
static int open_conn(struct conn *c)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        die("socket");
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
    c->want_out = 0;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(g_epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
        die("epoll_ctl(ADD)");
    return 0;
}

static void close_conn(struct conn *c)
{
    if (c->fd >= 0)
        close(c->fd); /* also removes it from the epoll set */
    c->fd = -1;
}

/* Writes as much of the request as the socket takes. Returns 0 (done or
 * would block) or -1 on an I/O error (recorded). */
static int pump_send(struct conn *c, struct stats *st)
{
    while (c->sent < g_req_len) {
        struct iovec iov[2];
        int n = 0;
        if (c->sent < HEAD_LEN) {
            iov[n].iov_base = c->head + c->sent;
            iov[n++].iov_len = HEAD_LEN - c->sent;
            iov[n].iov_base = g_body;
            iov[n++].iov_len = g_body_len;
        } else {
            size_t off = c->sent - HEAD_LEN;
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

/* Reads what is there. Returns 1 when a whole reply frame is in rbuf, 0 when
 * more is needed, -1 on error (recorded). */
static int pump_recv(struct conn *c, struct stats *st)
{
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
        ssize_t r = read(c->fd, c->rbuf + c->rlen, want);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            record_error(st, E_IO, c, strerror(errno));
            return -1;
        }
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

/* Checks a complete reply against the request. Returns REPLY_OK, or
 * REPLY_EXCEPTION (recorded; the connection is still in step, as an exception
 * is a whole reply), or REPLY_BROKEN (recorded; the connection is not to be
 * trusted any more). */
enum { REPLY_OK, REPLY_EXCEPTION, REPLY_BROKEN };
static int verify_reply(struct conn *c, struct stats *st)
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

/* After an error: drop the connection and open a new one, so one bad reply
 * does not end the run for this connection; give up after MAX_RECONNECTS. */
static void reopen(struct conn *c, struct stats *st)
{
    for (;;) {
        close_conn(c);
        c->state = C_DEAD;
        if (++c->reconnects > MAX_RECONNECTS)
            break;
        if (open_conn(c) < 0) {
            record_error(st, E_CONNECT, c, strerror(errno));
            break;
        }
        start_request(c, st, now_ns());
        if (c->state != C_DEAD)
            return;
    }
    g_alive--;
}

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

static void usage(void)
{
    fprintf(stderr,
            "usage: loadgen --port P [--host 127.0.0.1] [--connections N] [--payload BYTES]\n"
            "               [--duration SECONDS] [--warmup SECONDS]\n");
    exit(64);
}

int main(int argc, char **argv)
{
    const char *host = "127.0.0.1";
    long port = -1, nconn = 1, payload = 16;
    double duration = 5.0, warmup = 1.0;
    static const struct option opts[] = {
        {"host", required_argument, 0, 'h'},
        {"port", required_argument, 0, 'p'},
        {"connections", required_argument, 0, 'c'},
        {"payload", required_argument, 0, 's'},
        {"duration", required_argument, 0, 'd'},
        {"warmup", required_argument, 0, 'w'},
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
        default: usage();
        }
    }
    if (optind != argc || port <= 0 || port > 65535 || nconn < 1 || nconn > 60000 ||
        payload < 0 || (size_t)payload > MAX_FRAME - 28 || !(duration > 0) || warmup < 0)
        usage();

    signal(SIGPIPE, SIG_IGN); /* a closed peer is an error we count, not a death */
    memset(&g_addr, 0, sizeof g_addr);
    g_addr.sin_family = AF_INET;
    g_addr.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &g_addr.sin_addr) != 1) {
        fprintf(stderr, "loadgen: --host must be an IPv4 address, not %s\n", host);
        return 64;
    }
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
        put_u32(c->head, (uint32_t)(g_req_len - 4));
        put_u32(c->head + 4, VERSION_1 | MSG_CALL);
        put_u32(c->head + 8, 4);
        memcpy(c->head + 12, "echo", 4);
        put_u32(c->head + 16, (uint32_t)(i + 1));
        c->rcap = g_req_len;
        c->rbuf = xmalloc(c->rcap);
        if (open_conn(c) < 0) {
            record_error(&st, E_CONNECT, c, strerror(errno));
            continue;
        }
        c->state = C_SENDING;
        g_alive++;
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
        if (conns[i].state != C_DEAD) {
            start_request(&conns[i], &st, t0);
            if (conns[i].state == C_DEAD)
                reopen(&conns[i], &st);
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
           "\"wall_s\":%.3f,\"cpu_util\":%.3f}\n",
           g_alive, setup_s, user, sys, wall, wall > 0 ? (user + sys) / wall : 0.0);
    fflush(stdout);

    for (int i = 0; i < nconn; i++) {
        close_conn(&conns[i]);
        free(conns[i].rbuf);
    }
    free(conns);
    free(g_body);
    free(st.lat_us);
    close(g_epfd);
    return 0;
}
