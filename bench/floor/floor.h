/* bench/floor: the least CPU any design spends to keep a sealed 4 KiB page in another
 * process's RAM over loopback TCP (README.md). Shared by the client (the measuring
 * process) and the server it forks.
 *
 * Errors: -1 with a sentence in err (CONTRIBUTING.md, convention 1) where a call
 * takes err; the socket calls, floor_sealer_init and floor_client_goodbye return -1
 * with nothing more, floor_open returns false, floor_serve puts its sentence in
 * shared->error, and floor_client_new returns NULL when out of memory.
 */
#ifndef RAMPART_BENCH_FLOOR_H
#define RAMPART_BENCH_FLOOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/uio.h>

#include "frame_auth.h"
#include "wire.h"

#define FLOOR_PAGE RP_PAGE_SIZE
#define FLOOR_SEAL_TAG 16u
#define FLOOR_SEAL_KEY 32u
/* A frame on the wire: header, payload, frame tag. */
#define FLOOR_PAGE_FRAME (RP_HEADER_SIZE + FLOOR_PAGE + RP_TAG_LEN)
#define FLOOR_BARE_FRAME (RP_HEADER_SIZE + RP_TAG_LEN)
#define FLOOR_MAX_QD 1024u
/* Socket buffers and each side's receive buffer: room for a whole QD's pages at once,
 * so one recv takes whatever has arrived. */
#define FLOOR_SOCKET_BUFFER (4u << 20)
#define FLOOR_RECV_BUFFER (FLOOR_MAX_QD * FLOOR_PAGE_FRAME + FLOOR_PAGE_FRAME)

enum floor_form { FLOOR_WRITE, FLOOR_READ };

/* Ids of the two frames that bracket the measured window (PING). */
#define FLOOR_MARK_START 1u
#define FLOOR_MARK_END 2u

/* One process's account at a mark: its rusage and the syscalls it made. */
struct floor_mark {
  struct rusage usage;
  uint64_t syscalls;
};

/* What the server reports, in memory shared with the client (MAP_SHARED before fork). */
struct floor_shared {
  struct floor_mark server[2]; /* at FLOOR_MARK_START, FLOOR_MARK_END */
  uint64_t pages_stored, pages_served;
  char error[256]; /* the server's failure, if any */
};

/* A connection's end: the socket, both directions' frame tags, the syscalls made. */
struct floor_link {
  int fd;
  struct rp_frame_auth send_auth, recv_auth;
  uint64_t syscalls;
};

/* ---- floor_net.c: sockets and counted syscalls ---- */
int floor_listen(uint16_t *port, char *err, size_t errlen);
int floor_accept(int listen_fd, char *err, size_t errlen);
int floor_connect(uint16_t port, char *err, size_t errlen);
/* Blocking; -1 on EOF or error. Every call counts in link->syscalls. */
int floor_send_all(struct floor_link *link, const uint8_t *buf, size_t len);
int floor_writev_all(struct floor_link *link, struct iovec *iov, int iovcnt);
/* One blocking recv of up to len bytes: what has arrived. 0 at EOF, -1 on error. */
ssize_t floor_recv_some(struct floor_link *link, uint8_t *buf, size_t len);

/* ---- floor_seal.c: rampart's page seal (src/codec/page_seal.c), out of place both ways ---- */
struct floor_sealer {
  void *encrypt_ctx, *decrypt_ctx; /* EVP_CIPHER_CTX, keyed once */
  uint64_t next_version;
};
int floor_sealer_init(struct floor_sealer *s, const uint8_t key[FLOOR_SEAL_KEY]);
void floor_sealer_free(struct floor_sealer *s);
/* Seals `plain` as logical page `page` into `out`; returns its version, tag in `tag`. */
uint64_t floor_seal(struct floor_sealer *s, uint64_t page, const uint8_t *plain, uint8_t *out,
                    uint8_t tag[FLOOR_SEAL_TAG]);
/* Opens `in` (sealed as `page` at `version` with `tag`) into `out`; false if it fails. */
bool floor_open(struct floor_sealer *s, uint64_t page, uint64_t version,
                const uint8_t tag[FLOOR_SEAL_TAG], const uint8_t *in, uint8_t *out);

/* ---- floor_server.c: the forked server ---- */
/* Serves one connection until GOODBYE or EOF; 0, or -1 with shared->error set. */
int floor_serve(int fd, const struct rp_session_keys *keys, uint64_t store_pages,
                struct floor_shared *shared);

/* ---- floor_client.c: the measuring side ---- */
struct floor_result {
  enum floor_form form;
  unsigned qd;
  uint64_t pages;
  double seconds;
  struct floor_mark client[2];
};
struct floor_client;
struct floor_client *floor_client_new(int fd, const struct rp_session_keys *keys,
                                      uint64_t store_pages);
void floor_client_free(struct floor_client *c);
/* Writes every slot of the store once (unmeasured): what the read form reads. */
int floor_client_prefill(struct floor_client *c, char *err, size_t errlen);
/* One measured run: a start mark, `seconds` of the form at `qd`, everything in flight
 * drained, an end mark. */
int floor_client_run(struct floor_client *c, enum floor_form form, unsigned qd,
                     double seconds, struct floor_result *out, char *err, size_t errlen);
/* GOODBYE: the server exits. */
int floor_client_goodbye(struct floor_client *c);

#endif
