/* The bytes of request buffers every connection of rampart-nbd-server holds together: a
 * read's or a write's buffer past its first page, from the moment its header is taken
 * until its reply is sent (or, up to a size, kept for the next request). A connection
 * takes bytes before it allocates and gives them back when it frees; one that cannot
 * take leaves the request's header unread, so the client is held back by its socket
 * instead of the daemon's memory growing.
 *
 * Errors: none: a take that does not fit returns false, and nothing else fails.
 */
#ifndef RAMPART_NBD_BUFFER_BUDGET_H
#define RAMPART_NBD_BUFFER_BUDGET_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct nbd_buffer_budget {
  _Atomic uint64_t used;
  uint64_t limit;
};

void nbd_buffer_budget_init(struct nbd_buffer_budget *b, uint64_t limit);
/* True when bytes more stay within the limit (they are then counted as used). */
bool nbd_buffer_budget_take(struct nbd_buffer_budget *b, uint64_t bytes);
void nbd_buffer_budget_give(struct nbd_buffer_budget *b, uint64_t bytes);

#endif
