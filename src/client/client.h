/* The client side of the rampart protocol: one authenticated connection to one
 * rampartd, with many pipelined requests in flight.
 *
 * Threading follows libev's one-loop-per-thread pattern: a connection belongs to the
 * loop it is attached to, and every rp_conn_* call except rp_conn_open happens on that
 * loop's thread. The engine runs one I/O thread whose loop owns every server
 * connection and wakes it with ev_async; rampartctl and the tests use the blocking
 * helpers at the bottom, which run the loop until their request completes.
 *
 * No allocation on the hot path: a request (struct rp_request) is owned by the caller,
 * lives until its callback runs, and is tracked by the connection through an intrusive
 * table keyed by request id.
 *
 * Errors: struct rp_error (CONTRIBUTING.md, convention 3): calls return 0 or -1
 * and fill a non-NULL struct rp_error with an rp_status and a sentence; a request's
 * completion carries its rp_status.
 */
#ifndef RAMPART_CLIENT_H
#define RAMPART_CLIENT_H

#include <stdbool.h>
#include <sys/socket.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "client_error.h"
#include "client_session.h"
#include "frame_auth.h"
#include "wire.h"

struct ev_loop;
struct rp_conn;

/* Memory for n connections, allocated now: each a connection with its buffers and
 * cipher contexts. A connection opened with the pool takes a free entry (or, when none
 * is free, heap memory as without one) and gives it back when closed. Thread-safe.
 * NULL when out of memory.
 *
 * A pooled connection is small (a few KiB: its in-flight table and the part of one
 * frame that straddles two reads); it reads its bursts and runs its handshake in
 * scratch buffers that every pool in the process shares, made with the first pool. */
struct rp_conn_pool;
struct rp_conn_pool *rp_conn_pool_new(unsigned n);
/* Bytes the pool holds, with the process's shared scratch buffers (libcrypto's two
 * cipher contexts per entry not included). */
size_t rp_conn_pool_bytes(const struct rp_conn_pool *pool);
/* Frees the pool; every connection opened from it must be closed first. */
void rp_conn_pool_free(struct rp_conn_pool *pool);
/* Test API: takes every shared scratch buffer (true) or gives them all back (false), so
 * that a test drives pooled connections as they run when every one is busy: reading
 * into their own small buffers, handshaking in heap memory. Only while a pool exists
 * and no connection is using one. */
void rp_conn_scratch_hold(bool hold);

/* Connects and runs the handshake (HELLO; the challenge, whose MAC proves the server
 * holds the key before anything else is sent; AUTH with the client's MAC and the resume
 * token; Welcome) with a blocking socket bounded by connect_timeout_ms, then switches
 * the socket to non-blocking. From AUTH on every frame either side sends is
 * authenticated (frame_auth.h); a frame from the server whose tag fails drops the
 * connection like any other broken frame. Returns NULL with err filled on failure:
 * RP_ERR_CONNECT, RP_ERR_AUTH (either side's MAC or the Welcome's tag is wrong),
 * RP_ERR_VERSION, RP_ERR_TIMEOUT. */
struct rp_conn *rp_conn_open(const struct rp_conn_options *opts, struct rp_session_info *info,
                             struct rp_error *err);

/* Fails every request still in flight with RP_ERR_DISCONNECTED (callbacks run), closes
 * the socket and frees the connection. The session is kept by the server for its
 * lease; send GOODBYE first (rp_goodbye_sync) to free it at once. */
void rp_conn_close(struct rp_conn *conn);

/* Binds the connection to a loop. Must be called once before rp_conn_submit. */
void rp_conn_attach(struct rp_conn *conn, struct ev_loop *loop);
/* For an owner that submits and flushes from another thread while the attached loop
 * sleeps in its poll, holding the loop's lock (libev's thread-locking pattern; the
 * engine's inline submission): a count of the watchers this connection started that
 * the sleeping loop must be woken to see (its request timer; its write watcher, when
 * the socket did not take everything). A write watcher started by rp_conn_submit and
 * stopped again by a flush that sent everything is not counted: the loop never
 * needed to know. */
unsigned rp_conn_loop_changes(const struct rp_conn *conn);

/* Reading lent to the owner (the engine's rampart_reap): the attached loop stops
 * watching the socket, and the owner polls rp_conn_fd and calls rp_conn_read_now,
 * holding the loop's lock, so that replies are read on the thread that waits for them.
 * Lent back with false (the loop watches again: counted in rp_conn_loop_changes); the
 * blocking helpers (rp_*_sync, rp_conn_wait) take it back themselves. */
void rp_conn_lend_reading(struct rp_conn *conn, bool lend);
bool rp_conn_reading_lent(const struct rp_conn *conn);
/* The socket to poll for replies, or -1 once the connection failed or is closing. */
int rp_conn_fd(const struct rp_conn *conn);
/* Reads and handles every reply the socket holds, as the loop's read watcher would. */
void rp_conn_read_now(struct rp_conn *conn);

/* The loop the connection is attached to; if none, a private loop (owned by the
 * connection, destroyed by rp_conn_close) is made and attached first. NULL only if that
 * fails. Test API: for tests that submit asynchronously and then run the loop
 * themselves. */
struct ev_loop *rp_conn_loop(struct rp_conn *conn);

struct rp_request;
typedef void (*rp_request_done_fn)(struct rp_request *req);

/* A caller-owned request. Fill op/slot/count/page/done/user, submit, and do not touch it
 * (nor the page of a WRITE) until done runs (on the loop thread): on a TCP connection the
 * kernel sends the page, header and tag from this memory without copying them
 * (MSG_ZEROCOPY), so it reads them until the server has them. On completion status is
 * RP_OK or an rp_status, and error_message holds the server's sentence for wire errors
 * ("" otherwise). */
struct rp_request {
  /* filled by the caller */
  uint8_t op; /* RP_OP_WRITE, RP_OP_READ, RP_OP_FREE, RP_OP_PING */
  uint64_t slot;
  uint32_t count; /* FREE only */
  uint8_t *page;  /* WRITE: RP_PAGE_SIZE bytes to send; READ: where to put them */
  rp_request_done_fn done;
  void *user;
  /* the caller's own link while the request is not submitted (the engine queues
   * requests to resend on a resumed session through it); never touched here */
  struct rp_request *caller_next;
  /* filled on completion */
  uint16_t status;
  char error_message[160];
  /* owned by the connection */
  uint64_t id;
  uint64_t deadline_ns;
  struct rp_request *next_in_bucket;
  struct rp_request *next_queued;
  uint32_t sent_bytes; /* of header + payload + tag, for partial writes */
  bool tagged;         /* header encoded, tag computed: its sequence number is taken */
  /* The frame's header and tag as sent. They live here, like the page, because a
   * zero-copy send (MSG_ZEROCOPY) hands the kernel these very bytes: they must stay as
   * they are until the reply arrives. */
  uint8_t header[RP_HEADER_SIZE];
  uint8_t tag[RP_TAG_LEN];
};

/* Queues a hot-path request. Never blocks and never allocates. If the connection is
 * already closed, done runs before this returns with RP_ERR_DISCONNECTED. */
void rp_conn_submit(struct rp_conn *conn, struct rp_request *req);
/* Sends what is queued now rather than when the loop next finds the socket writable:
 * for a caller that has just submitted a burst outside a completion callback (where
 * the connection already flushes on its own), saving one loop iteration per burst. */
void rp_conn_flush(struct rp_conn *conn);

/* Test API: requests submitted and not yet completed. */
size_t rp_conn_in_flight(const struct rp_conn *conn);

/* The server pushed an ADVISE. */
typedef void (*rp_advise_fn)(struct rp_conn *conn, bool pressure, const char *reason,
                             uint64_t free_pages, void *user);
/* The connection failed (reset, EOF, protocol error, timeout). Runs once, after every
 * in-flight request has completed with an error. The caller then closes it. */
typedef void (*rp_disconnect_fn)(struct rp_conn *conn, const struct rp_error *why,
                                 void *user);

void rp_conn_set_callbacks(struct rp_conn *conn, rp_advise_fn on_advise,
                           rp_disconnect_fn on_disconnect, void *user);

bool rp_conn_is_connected(const struct rp_conn *conn);
const char *rp_conn_peer(const struct rp_conn *conn);

/* The address the connection reached (getpeername): a caller that reconnects later can
 * pass it as rp_conn_options.addr and skip resolving the name again. 0, or -1. */
int rp_conn_peer_address(const struct rp_conn *conn, struct sockaddr_storage *addr,
                         socklen_t *addr_len); /* "host:port" */

/* ---- Blocking helpers (rampartctl, tests, engine start-up). Each runs the attached
 * loop (or a private one if none is attached) until its request completes. They must
 * not be called from inside a callback. Return 0, or -1 with err filled. */

int rp_reserve_sync(struct rp_conn *conn, uint64_t pages, uint64_t *reserved_pages,
                    uint64_t *free_pages, struct rp_error *err);
/* Test API (the engine and rampartctl send pages asynchronously): rp_write_sync,
 * rp_read_sync, rp_ping_sync. */
int rp_write_sync(struct rp_conn *conn, uint64_t slot, const uint8_t *page,
                  struct rp_error *err);
int rp_read_sync(struct rp_conn *conn, uint64_t slot, uint8_t *page, struct rp_error *err);
int rp_free_sync(struct rp_conn *conn, uint64_t slot, uint32_t count, struct rp_error *err);
int rp_ping_sync(struct rp_conn *conn, struct rp_error *err);
/* Ends the session: the server frees its pages now instead of after the lease. */
int rp_goodbye_sync(struct rp_conn *conn, struct rp_error *err);

/* The server's counters, as the Stat message defines them. */
struct rp_server_stat {
  char server_name[64];
  uint32_t version;
  uint64_t uptime_seconds;
  uint32_t page_size;
  uint64_t capacity_pages, reserved_pages, stored_pages, stored_bytes, resident_bytes;
  uint32_t clients_connected, sessions_attached, sessions_detached;
  uint64_t sessions_expired;
  uint64_t ops_write, ops_read, ops_free, bytes_in, bytes_out;
  uint64_t errors_protocol, errors_auth, errors_refused;
  bool pressure;
  bool draining;
  double psi_some_avg10;
  uint64_t mem_available_bytes;
  uint64_t advises_sent;
  uint64_t session_stored_pages, session_reserved_pages;
};

int rp_stat_sync(struct rp_conn *conn, struct rp_server_stat *stat, struct rp_error *err);

/* Test API: runs the loop until `pred(arg)` is true or timeout_ms passes, for tests
 * waiting on an advise or a disconnect. Returns true if pred became true. */
bool rp_conn_wait(struct rp_conn *conn, bool (*pred)(void *arg), void *arg,
                  uint32_t timeout_ms);

#endif
