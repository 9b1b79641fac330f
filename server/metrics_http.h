/* rampartd --metrics: a small HTTP/1.x listener on the server's libev loop that answers
 * GET /metrics with metrics_render.c's text, for a Prometheus scrape.
 *
 * It shares nothing with the page protocol but the loop: its own socket (only opened
 * when --metrics is given), a fixed number of client slots with fixed buffers allocated
 * once at start, requests of at most 2 KiB, one response per connection, and idle
 * sockets closed after a few seconds. A scrape renders the counters once; the page I/O
 * path neither allocates nor does any work for it.
 *
 * Errors: rps_metrics_http_start returns NULL only when out of memory, with no sentence
 * (CONTRIBUTING.md, convention 1's out-of-memory case).
 */
#ifndef RAMPART_SERVER_METRICS_HTTP_H
#define RAMPART_SERVER_METRICS_HTTP_H

#include <ev.h>

struct rps_server;
struct rps_metrics_http;

/* Serves on listen_fd (bound, listening, non-blocking; the listener owns it from here).
 * NULL when out of memory (listen_fd is closed). */
struct rps_metrics_http *rps_metrics_http_start(struct ev_loop *loop, int listen_fd,
                                                struct rps_server *srv);

/* Closes the listening socket and every client. NULL is ignored. */
void rps_metrics_http_stop(struct rps_metrics_http *mh);

#endif
