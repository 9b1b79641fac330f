/* The stores' tables (page_store_ops.h): one per store, the store of each kind of page
 * map entry, and the store a new version goes to. */
#include "page_store_ops.h"

#include "engine_core.h"

const struct page_store_ops page_store_zero = {
  .name = "zero page",
  .read = page_store_zero_read,
  .release = page_store_zero_release,
};

const struct page_store_ops page_store_remote = {
  .name = "server",
  .read = page_store_remote_read,
  .release = page_store_remote_release,
  .write = page_store_remote_write,
};

const struct page_store_ops page_store_spill = {
  .name = "spill store",
  .read = page_store_spill_read,
  .release = page_store_spill_release,
  .write = page_store_spill_write,
  .write_copy = page_store_spill_write_copy,
};

const struct page_store_ops page_store_local = {
  .name = "local RAM store",
  .read = page_store_local_read,
  .release = page_store_local_release,
  .write = page_store_local_write,
};

const struct page_store_ops *const page_stores_by_kind[4] = {
  [PAGE_ZERO] = &page_store_zero,
  [PAGE_REMOTE] = &page_store_remote,
  [PAGE_SPILL] = &page_store_spill,
  [PAGE_LOCAL] = &page_store_local,
};

const struct page_store_ops *page_store_for_write(const struct rampart_engine *e)
{
  return e->set.nservers == 0 ? &page_store_local : &page_store_remote;
}
