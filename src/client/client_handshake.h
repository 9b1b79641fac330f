/* Internal to the client library (client_conn.c and client_handshake.c): connecting and
 * the handshake, and the few helpers both halves use. Not part of client.h's API.
 *
 * Errors: struct rp_error, as client.h (CONTRIBUTING.md, convention 3).
 */
#ifndef RAMPART_CLIENT_HANDSHAKE_H
#define RAMPART_CLIENT_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "client_error.h"
#include "client_session.h"
#include "frame_auth.h"
#include "wire.h"

/* Largest frame the handshake sends or receives, with its tag. */
#define CLIENT_MAX_FRAME (RP_MAX_CONTROL_FRAME + RP_TAG_LEN)
/* The handshake's working space: its request frame, the reply, and an arena to decode
 * the reply's message into (the largest control payload, its structs, alignment). */
#define CLIENT_HANDSHAKE_BUF (2u * CLIENT_MAX_FRAME + RP_MAX_CONTROL_PAYLOAD + 16384u)

#ifndef SO_ZEROCOPY
#define SO_ZEROCOPY 60
#endif
#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY 0x4000000
#endif

/* Connects to o's server (o->addr if given, else resolving o->host/o->port) and runs the
 * handshake within timeout_ms, in buf (at least CLIENT_HANDSHAKE_BUF bytes). On success
 * *fd is the connected, non-blocking socket, with SO_ZEROCOPY when it takes it; tx and rx
 * are keyed, info holds the Welcome, and *zerocopy_sends counts the handshake's sends
 * made with MSG_ZEROCOPY, whose completions the socket's error queue reports later. 0,
 * or -1 with err (RP_ERR_CONNECT, RP_ERR_AUTH, RP_ERR_VERSION, RP_ERR_TIMEOUT; a timeout
 * names the handshake's phase, how long it ran and what of our request the socket still
 * holds) and nothing left open. */
int client_connect(const struct rp_conn_options *o, const char *peer, uint32_t timeout_ms,
                   uint8_t *buf, size_t buf_len, struct rp_frame_auth *tx,
                   struct rp_frame_auth *rx, int *fd, uint32_t *zerocopy_sends,
                   struct rp_session_info *info, struct rp_error *err);

#endif
