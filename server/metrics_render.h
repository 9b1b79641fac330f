/* rampartd's counters in the Prometheus text format: what GET /metrics returns
 * (metrics_http.c). The same numbers as 'rampartctl stat', read from the same
 * rps_server_fill_stat, so the two can never disagree.
 *
 * Errors: none: nothing here fails; a text that does not fit shows as a returned length
 * of buflen or more.
 */
#ifndef RAMPART_SERVER_METRICS_RENDER_H
#define RAMPART_SERVER_METRICS_RENDER_H

#include <stddef.h>

struct rps_server;

/* Writes the text into buf. Returns the length the whole text needs: buflen or more
 * means it did not fit and must not be served. */
size_t rps_metrics_render(struct rps_server *srv, char *buf, size_t buflen);

#endif
