/* Reads (page_read.c): from the page's server, its group (degraded), the disk copy or
 * the spill store, each copy verified.
 *
 * Errors: a read's op completes with 0 or negative errno (page_op.h;
 * CONTRIBUTING.md, convention 2).
 */
#ifndef RAMPART_PAGE_READ_H
#define RAMPART_PAGE_READ_H

struct page_op;

void page_read_start(struct page_op *op);

#endif
