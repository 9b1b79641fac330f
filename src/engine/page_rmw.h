/* Reads and writes of part of one page (page_rmw.c), from frontend threads: a sub-page
 * write holds its page's stripe lock from its read to the end of its write-back.
 *
 * Errors: 0 or negative errno, as rampart.h's I/O calls (docs/CONTRIBUTING.md,
 * convention 2).
 */
#ifndef RAMPART_PAGE_RMW_H
#define RAMPART_PAGE_RMW_H

#include <stdint.h>

struct rampart_engine;

void page_rmw_init(struct rampart_engine *e);
void page_rmw_destroy(struct rampart_engine *e);
int page_rmw_read(struct rampart_engine *e, uint8_t *dst, uint32_t len, uint64_t off);
/* src NULL: patch with zeros. */
int page_rmw_write(struct rampart_engine *e, const uint8_t *src, uint32_t len, uint64_t off,
                   uint32_t flags);

#endif
