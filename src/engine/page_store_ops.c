/* The stores' tables (page_store_ops.h): one per store, and the store of each kind of
 * page map entry. */
#include "page_store_ops.h"

const struct page_store_ops page_store_zero = {
  .name = "zero page",
  .read = page_store_zero_read,
  .release = page_store_zero_release,
};

const struct page_store_ops page_store_remote = {
  .name = "server",
  .read = page_store_remote_read,
  .release = page_store_remote_release,
};

const struct page_store_ops page_store_spill = {
  .name = "spill store",
  .read = page_store_spill_read,
  .release = page_store_spill_release,
};

const struct page_store_ops page_store_local = {
  .name = "local RAM store",
  .read = page_store_local_read,
  .release = page_store_local_release,
};

const struct page_store_ops *const page_stores_by_kind[4] = {
  [PAGE_ZERO] = &page_store_zero,
  [PAGE_REMOTE] = &page_store_remote,
  [PAGE_SPILL] = &page_store_spill,
  [PAGE_LOCAL] = &page_store_local,
};
