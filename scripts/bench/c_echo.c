/* The ceiling the benchmark shows beside the Thrift servers: a single-threaded C epoll
 * server answering the demo's echo(s) calls, framed binary, with no Thrift library at
 * all. What a Python server could at best approach on one core: the kernel's share of
 * each call plus almost nothing.
 *
 * It does not decode: an echo call's frame becomes its reply by changing two things of
 * the same size, the message type (CALL 1 -> REPLY 2, the last byte of the strict
 * version word) and the id of the struct's one field (echo_args.s is 1, the result's
 * success is 0). Any other frame, or one not starting with a strict CALL header,
 * closes the connection.
 *
 *   c_echo PORT      (listens on 127.0.0.1:PORT, 0 for any free port; prints the port it
 *                     bound on one line, then runs until killed)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_FRAME (64u << 20)
#define MAX_EVENTS 256

typedef struct {
    int fd;
    uint8_t *buf;      /* read bytes not yet answered (starts at buf[0]) */
    size_t len, cap;
    uint8_t *out;      /* reply bytes not yet written */
    size_t out_len, out_off, out_cap;
} conn_t;

static uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static int reserve(uint8_t **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t cap2 = *cap ? *cap : 65536;
    while (cap2 < need) cap2 *= 2;
    uint8_t *b = realloc(*buf, cap2);
    if (!b) return -1;
    *buf = b;
    *cap = cap2;
    return 0;
}

static void drop(int ep, conn_t *c) {
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->buf);
    free(c->out);
    free(c);
}

/* Turn the whole echo call frames at the front of c->buf into replies in c->out.
 * Returns -1 on a frame that is not an echo call. */
static int answer(conn_t *c) {
    size_t off = 0;
    while (c->len - off >= 4) {
        uint32_t size = be32(c->buf + off);
        if (size > MAX_FRAME || size < 12) return -1;
        if (c->len - off - 4 < size) break;
        uint8_t *m = c->buf + off + 4;
        if (be32(m) != 0x80010001u) return -1;
        uint32_t name_len = be32(m + 4);
        size_t field = 8 + (size_t)name_len + 4;   /* version, name, seqid */
        if (name_len > size || field + 3 > size) return -1;
        if (reserve(&c->out, &c->out_cap, c->out_len + 4 + size) < 0) return -1;
        uint8_t *r = c->out + c->out_len;
        memcpy(r, c->buf + off, 4 + (size_t)size);
        r[4 + 3] = 2;                   /* REPLY */
        r[4 + field + 1] = 0;           /* field id 1 -> 0 (i16, big-endian) */
        r[4 + field + 2] = 0;
        c->out_len += 4 + size;
        off += 4 + size;
    }
    memmove(c->buf, c->buf + off, c->len - off);
    c->len -= off;
    return 0;
}

/* Write what c->out holds; returns -1 on error, 1 if bytes remain, 0 when all went. */
static int flush(conn_t *c) {
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN) return 1;
            if (errno == EINTR) continue;
            return -1;
        }
        c->out_off += (size_t)n;
    }
    c->out_off = c->out_len = 0;
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s PORT\n", argv[0]);
        return 2;
    }
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1]))};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(lfd, 4096) < 0) {
        perror("c_echo: bind/listen");
        return 1;
    }
    socklen_t alen = sizeof addr;
    getsockname(lfd, (struct sockaddr *)&addr, &alen);
    printf("%d\n", ntohs(addr.sin_port));
    fflush(stdout);
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    struct epoll_event events[MAX_EVENTS];
    for (;;) {
        int n = epoll_wait(ep, events, MAX_EVENTS, -1);
        if (n < 0 && errno != EINTR) {
            perror("c_echo: epoll_wait");
            return 1;
        }
        for (int i = 0; i < n; i++) {
            conn_t *c = events[i].data.ptr;
            if (c == NULL) {            /* the listener */
                int fd;
                while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    conn_t *nc = calloc(1, sizeof *nc);
                    if (!nc) { close(fd); continue; }
                    nc->fd = fd;
                    struct epoll_event cev = {.events = EPOLLIN, .data.ptr = nc};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev);
                }
                continue;
            }
            if (events[i].events & EPOLLOUT) {
                int left = flush(c);
                if (left < 0) { drop(ep, c); continue; }
                if (left == 0) {
                    struct epoll_event cev = {.events = EPOLLIN, .data.ptr = c};
                    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &cev);
                }
                continue;
            }
            int bad = 0;
            for (;;) {
                if (reserve(&c->buf, &c->cap, c->len + 65536) < 0) { bad = 1; break; }
                ssize_t got = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
                if (got > 0) { c->len += (size_t)got; continue; }
                if (got == 0 || (errno != EAGAIN && errno != EINTR)) bad = 1;
                if (got < 0 && errno == EINTR) continue;
                break;
            }
            if (!bad && answer(c) < 0) bad = 1;
            int left = bad ? -1 : flush(c);
            if (left < 0) { drop(ep, c); continue; }
            if (left > 0) {
                struct epoll_event cev = {.events = EPOLLOUT, .data.ptr = c};
                epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &cev);
            }
        }
    }
}
