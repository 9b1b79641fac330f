/* Reads (page_read.c): from the page's server, its group (degraded), the disk copy or
 * the spill store, each copy verified. */
#ifndef RAMPART_PAGE_READ_H
#define RAMPART_PAGE_READ_H

#include <stdint.h>

struct page_op;
struct rampart_engine;

void page_read_start(struct page_op *op);
/* A write of `page` ended (page_write.c): the reads that met its bytes not yet landed
 * start again. */
void page_read_write_ended(struct rampart_engine *e, uint64_t page);
/* The tick: reads that have waited io-timeout for writes of their page start over and
 * wait no more. */
void page_read_expire_write_waits(struct rampart_engine *e, uint64_t now_ns);

#endif
