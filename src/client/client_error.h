/* The client library's error: an rp_status and a sentence for a person (client.h's
 * convention), and the helpers that word a server's refusal. Its own module so that
 * both halves of a connection (client_conn.c, client_handshake.c) use it without
 * including each other.
 *
 * Errors: struct rp_error (CONTRIBUTING.md, convention 3).
 */
#ifndef RAMPART_CLIENT_ERROR_H
#define RAMPART_CLIENT_ERROR_H

#include <stddef.h>
#include <stdint.h>

/* What went wrong, for a person: code is an rp_status (wire or local), message says
 * what happened and what to do. */
struct rp_error {
  uint16_t code;
  char message[384];
};

/* Fills err (if not NULL) with code and a formatted message. */
void rp_error_set(struct rp_error *err, uint16_t code, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));

/* The server's sentence in an Error payload, or the status's name. */
void client_copy_server_message(char *out, size_t outlen, const uint8_t *payload,
                                uint32_t len, uint16_t status);
/* Our advice for a status, unless the server's sentence already carries it, and the
 * separator to put before it. */
const char *client_advice_text(const char *said, uint16_t status);
const char *client_advice_sep(const char *said, uint16_t status);

#endif
