/* Page pool and per-session slot tables (see page_store.h).
 *
 * Pages are named by a 64-bit id, chunk index * RPS_CHUNK_PAGES + page within chunk,
 * rather than by pointer: freeing a page must find its chunk, and an id finds it with
 * one shift instead of a search. Slot tables store id + 1 so that zero (what calloc
 * gives) means "empty".
 *
 * Each chunk keeps its free pages on a small stack of 16-bit indexes outside the chunk,
 * so a free page is never touched (an untouched page of an anonymous mapping costs the
 * host nothing), and a chunk whose pages are all free is unmapped. One empty chunk is
 * kept mapped so that a client writing and freeing around a chunk boundary does not
 * make us map and unmap 2 MiB on every page.
 *
 * A page a client frees goes back to the host (MADV_DONTNEED) unless the small warm pool
 * has room for it. Parity logging frees pages all over the pool as old versions are
 * cleaned, so chunks rarely empty: without giving pages back, a server that had churned
 * through overwrites would keep several KiB mapped per stored page, RAM it was lent to
 * give back. But under that churn a client frees a page for nearly every page it
 * writes, and giving each one back costs a system call, a TLB flush and, when the slot
 * is written again, a page fault and a zeroed page (docs/performance.md, "Figures from
 * the code"). The warm pool keeps up to
 * RPS_WARM_PAGES freed pages resident (a sixteenth of the store's capacity, if less)
 * and hands them out first, so a write after a free reuses a page that is already
 * mapped. Resident memory is the stored pages, at most the warm pool, and metadata,
 * whatever the churn; under memory pressure the server empties the pool and keeps
 * none (rps_store_keep_warm). Pages of a whole session that ends go back at once: that
 * is not churn. Pages that go back together (a FREE of many slots, a shrink, a session's
 * end) are given back in runs of adjacent pages, one madvise per run.
 *
 * The pages are other hosts' memory, so they are treated as secrets (docs/security.md): chunks
 * are excluded from core dumps (MADV_DONTDUMP), every page is wiped (OPENSSL_cleanse)
 * when it goes back to the host and when the store is destroyed, because MADV_DONTNEED
 * and munmap hand the frame back to the kernel with its bytes intact. A warm page is
 * not wiped while it stays in the pool: it never leaves this process, and the write
 * that reuses it replaces all 4 KiB before anyone can read the slot. With --mlock the
 * process runs under mlockall(MCL_FUTURE | MCL_ONFAULT), so chunks are locked page by
 * page as pages are written (not all 2 MiB at map time); plain MADV_DONTNEED is refused
 * (EINVAL) on locked memory, so a locked store frees with MADV_DONTNEED_LOCKED (Linux
 * 5.18), and on an older kernel a freed page simply stays resident and locked until it
 * is reused or its chunk empties and is unmapped.
 */
#include "page_store.h"

#include <errno.h>
#include <inttypes.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "dlist.h"

#define LEAF_SLOTS 512u /* slots per slot-table leaf: one leaf is ~4 KiB */

#ifndef MADV_DONTNEED_LOCKED
#define MADV_DONTNEED_LOCKED 24 /* Linux 5.18; older headers lack it */
#endif

struct chunk {
  uint8_t *base;
  uint64_t index;  /* position in store->chunks */
  uint32_t npages; /* RPS_CHUNK_PAGES, or fewer for the pool's last chunk */
  uint32_t nfree;
  struct chunk *prev, *next; /* on store's list of chunks with free pages */
  uint16_t free_stack[RPS_CHUNK_PAGES];
};

struct rps_store {
  uint64_t capacity;
  uint64_t reserved;
  uint64_t stored;
  uint64_t nchunks;                      /* length of chunks[]: enough for capacity pages */
  struct chunk **chunks;                 /* NULL where not mapped */
  uint64_t first_unmapped;               /* no NULL entry in chunks[] below this index */
  struct chunk *avail_head, *avail_tail; /* chunks with at least one free page */
  uint64_t chunks_mapped;
  uint64_t empty_chunks; /* mapped chunks with every page free */
  uint64_t meta_bytes;   /* every byte of metadata we allocated */
  bool locked;           /* the process runs under mlockall: free with DONTNEED_LOCKED */
  bool dontneed_refused; /* the kernel lacks DONTNEED_LOCKED: stop asking */
  /* Freed pages kept mapped for the next writes (ids + 1, a stack: the most recently
   * freed page is the likeliest still in the CPU's caches). */
  uint64_t *warm;
  uint32_t warm_count, warm_max;
  bool warm_off; /* memory pressure: keep none */
  /* Freed pages not yet given back: one run of adjacent pages of one chunk, so that a
   * FREE of many slots, a shrink or a session's end costs one madvise per run rather
   * than one per page. Empty (NULL chunk) whenever a public function returns, as a page
   * in it may be handed out again by the next write. */
  struct chunk *give_back_chunk;
  uint8_t *give_back_start, *give_back_end;
};

struct leaf {
  uint32_t used;
  uint64_t ids[LEAF_SLOTS]; /* page id + 1, or 0 for an empty slot */
};

struct rps_account {
  uint64_t reserved;
  uint64_t stored;
  uint64_t nleaves; /* ceil(reserved / LEAF_SLOTS) */
  struct leaf **root;
};

/* ---- chunks ------------------------------------------------------------------ */

static void avail_remove(struct rps_store *s, struct chunk *c)
{
  DLIST_REMOVE(s->avail_head, s->avail_tail, c, prev, next);
}

static void avail_push_head(struct rps_store *s, struct chunk *c)
{
  DLIST_PUSH_HEAD(s->avail_head, s->avail_tail, c, prev, next);
}

/* Empty chunks go to the tail so that allocation fills partly used chunks first and
 * empty ones stay empty long enough to be unmapped. */
static void avail_push_tail(struct rps_store *s, struct chunk *c)
{
  DLIST_PUSH_TAIL(s->avail_head, s->avail_tail, c, prev, next);
}

static struct chunk *chunk_map(struct rps_store *s)
{
  uint64_t idx = s->first_unmapped;
  while (idx < s->nchunks && s->chunks[idx])
    idx++;
  if (idx >= s->nchunks)
    return NULL; /* cannot happen while stored <= reserved <= capacity */
  uint64_t first_page = idx * RPS_CHUNK_PAGES;
  uint64_t left = s->capacity - first_page;
  uint32_t npages = left < RPS_CHUNK_PAGES ? (uint32_t)left : RPS_CHUNK_PAGES;

  struct chunk *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  void *base = mmap(NULL, (size_t)npages * RP_PAGE_SIZE, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    free(c);
    return NULL;
  }
  /* Other hosts' pages have no place in this host's core dumps. */
  (void)madvise(base, (size_t)npages * RP_PAGE_SIZE, MADV_DONTDUMP);
  c->base = base;
  c->index = idx;
  c->npages = npages;
  c->nfree = npages;
  /* Hand pages out in address order: the kernel then sees sequential first touches. */
  for (uint32_t i = 0; i < npages; i++)
    c->free_stack[i] = (uint16_t)(npages - 1 - i);
  s->chunks[idx] = c;
  s->first_unmapped = idx + 1;
  s->chunks_mapped++;
  s->empty_chunks++;
  s->meta_bytes += sizeof *c;
  avail_push_tail(s, c);
  return c;
}

static void chunk_unmap(struct rps_store *s, struct chunk *c)
{
  if (s->give_back_chunk == c)
    s->give_back_chunk = NULL; /* munmap gives those pages back with the rest */
  avail_remove(s, c);
  munmap(c->base, (size_t)c->npages * RP_PAGE_SIZE);
  s->chunks[c->index] = NULL;
  if (c->index < s->first_unmapped)
    s->first_unmapped = c->index;
  s->chunks_mapped--;
  s->empty_chunks--;
  s->meta_bytes -= sizeof *c;
  free(c);
}

/* Returns a page id + 1, or 0 when the system refuses memory. */
static uint64_t page_alloc(struct rps_store *s)
{
  if (s->warm_count > 0) {
    s->stored++;
    return s->warm[--s->warm_count];
  }
  struct chunk *c = s->avail_head;
  if (!c && !(c = chunk_map(s)))
    return 0;
  if (c->nfree == c->npages)
    s->empty_chunks--;
  uint16_t pos = c->free_stack[--c->nfree];
  if (c->nfree == 0)
    avail_remove(s, c);
  s->stored++;
  return c->index * RPS_CHUNK_PAGES + pos + 1;
}

/* Gives the frames of the pending run of freed pages back to the host. Advice only: if
 * the kernel refuses, the pages stay resident and are reused as they are. */
static void give_back_flush(struct rps_store *s)
{
  if (!s->give_back_chunk)
    return;
  uint8_t *start = s->give_back_start;
  size_t len = (size_t)(s->give_back_end - start);
  s->give_back_chunk = NULL;
  if (!s->locked) {
    (void)madvise(start, len, MADV_DONTNEED);
    return;
  }
  if (!s->dontneed_refused && madvise(start, len, MADV_DONTNEED_LOCKED) < 0 &&
      errno == EINVAL)
    s->dontneed_refused = true;
}

/* Adds a freed page of chunk c to the pending run, or gives that run back first when
 * the page does not extend it. */
static void page_give_back(struct rps_store *s, struct chunk *c, uint8_t *page)
{
  if (s->give_back_chunk == c) {
    if (page == s->give_back_end) {
      s->give_back_end += RP_PAGE_SIZE;
      return;
    }
    if (page + RP_PAGE_SIZE == s->give_back_start) {
      s->give_back_start = page;
      return;
    }
  }
  give_back_flush(s);
  s->give_back_chunk = c;
  s->give_back_start = page;
  s->give_back_end = page + RP_PAGE_SIZE;
}

/* Returns a page no slot holds (not counted as stored) to its chunk, wiped, and its
 * frame to the host. */
static void page_return(struct rps_store *s, uint64_t id_plus_one)
{
  uint64_t id = id_plus_one - 1;
  struct chunk *c = s->chunks[id / RPS_CHUNK_PAGES];
  if (c->nfree == 0)
    avail_push_head(s, c);
  uint16_t pos = (uint16_t)(id % RPS_CHUNK_PAGES);
  uint8_t *page = c->base + (size_t)pos * RP_PAGE_SIZE;
  OPENSSL_cleanse(page, RP_PAGE_SIZE);
  c->free_stack[c->nfree++] = pos;
  if (c->nfree == c->npages) {
    s->empty_chunks++;
    if (s->empty_chunks > 1) {
      chunk_unmap(s, c);
      return;
    }
    avail_remove(s, c);
    avail_push_tail(s, c);
  }
  page_give_back(s, c, page);
}

/* A page that no slot holds any more. keep_warm: the client freed it and will likely
 * write another soon (churn), so it may stay mapped in the warm pool. */
static void page_release(struct rps_store *s, uint64_t id_plus_one, bool keep_warm)
{
  s->stored--;
  if (keep_warm && !s->warm_off && s->warm_count < s->warm_max)
    s->warm[s->warm_count++] = id_plus_one;
  else
    page_return(s, id_plus_one);
}

static void release_warm(struct rps_store *s)
{
  while (s->warm_count > 0)
    page_return(s, s->warm[--s->warm_count]);
  give_back_flush(s);
}

void rps_store_keep_warm(struct rps_store *s, bool keep)
{
  s->warm_off = !keep;
  if (!keep)
    release_warm(s);
}

static uint8_t *page_addr(const struct rps_store *s, uint64_t id_plus_one)
{
  uint64_t id = id_plus_one - 1;
  return s->chunks[id / RPS_CHUNK_PAGES]->base + (id % RPS_CHUNK_PAGES) * RP_PAGE_SIZE;
}

/* ---- pool ------------------------------------------------------------------- */

struct rps_store *rps_store_create(uint64_t capacity_pages)
{
  if (capacity_pages == 0 || capacity_pages > RP_MAX_SLOT + 1)
    return NULL;
  struct rps_store *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->capacity = capacity_pages;
  s->nchunks = (capacity_pages + RPS_CHUNK_PAGES - 1) / RPS_CHUNK_PAGES;
  s->chunks = calloc(s->nchunks, sizeof *s->chunks);
  s->warm_max = (uint32_t)(capacity_pages / 16 < RPS_WARM_PAGES ? capacity_pages / 16
                                                                : RPS_WARM_PAGES);
  s->warm = calloc(s->warm_max ? s->warm_max : 1, sizeof *s->warm);
  if (!s->chunks || !s->warm) {
    free(s->chunks);
    free(s->warm);
    free(s);
    return NULL;
  }
  s->meta_bytes = sizeof *s + s->nchunks * sizeof *s->chunks +
                  (uint64_t)s->warm_max * sizeof *s->warm;
  return s;
}

/* Wipes the pages of c still in use; free ones were wiped when freed, and wiping
 * them again would fault in pages never touched. */
static void chunk_wipe_used(struct chunk *c)
{
  uint8_t is_free[RPS_CHUNK_PAGES] = { 0 };
  for (uint32_t i = 0; i < c->nfree; i++)
    is_free[c->free_stack[i]] = 1;
  for (uint32_t p = 0; p < c->npages; p++)
    if (!is_free[p])
      OPENSSL_cleanse(c->base + (size_t)p * RP_PAGE_SIZE, RP_PAGE_SIZE);
}

void rps_store_set_locked(struct rps_store *s, bool locked)
{
  s->locked = locked;
}

void rps_store_destroy(struct rps_store *s)
{
  if (!s)
    return;
  release_warm(s); /* wipes them: warm pages were not wiped when freed */
  for (uint64_t i = 0; i < s->nchunks; i++) {
    struct chunk *c = s->chunks[i];
    if (c) {
      chunk_wipe_used(c);
      munmap(c->base, (size_t)c->npages * RP_PAGE_SIZE);
      free(c);
    }
  }
  free(s->chunks);
  free(s->warm);
  free(s);
}

void rps_store_get_stats(const struct rps_store *s, struct rps_store_stats *out)
{
  out->capacity_pages = s->capacity;
  out->reserved_pages = s->reserved;
  out->free_pages = s->capacity - s->reserved;
  out->stored_pages = s->stored;
  out->chunks_mapped = s->chunks_mapped;
  out->warm_pages = s->warm_count;
  /* Untouched and released pages of mapped chunks cost the host nothing. */
  out->resident_bytes = (s->stored + s->warm_count) * RP_PAGE_SIZE + s->meta_bytes;
}

/* ---- accounts ----------------------------------------------------------------- */

struct rps_account *rps_account_create(struct rps_store *s)
{
  struct rps_account *a = calloc(1, sizeof *a);
  if (a)
    s->meta_bytes += sizeof *a;
  return a;
}

uint64_t rps_account_reserved(const struct rps_account *a)
{
  return a->reserved;
}
uint64_t rps_account_stored(const struct rps_account *a)
{
  return a->stored;
}

static void leaf_free(struct rps_store *s, struct rps_account *a, uint64_t li)
{
  free(a->root[li]);
  a->root[li] = NULL;
  s->meta_bytes -= sizeof(struct leaf);
}

/* Frees the pages of slots [from, to) of one leaf, and the leaf when it empties. */
static void leaf_clear_range(struct rps_store *s, struct rps_account *a, uint64_t li,
                             uint32_t from, uint32_t to, bool keep_warm)
{
  struct leaf *l = a->root[li];
  if (!l)
    return;
  for (uint32_t i = from; i < to && l->used > 0; i++) {
    if (l->ids[i]) {
      page_release(s, l->ids[i], keep_warm);
      l->ids[i] = 0;
      l->used--;
      a->stored--;
    }
  }
  if (l->used == 0)
    leaf_free(s, a, li);
}

/* Frees every page in slots [from, to), walking leaf by leaf so that an unwritten
 * stretch costs one NULL check per 512 slots. keep_warm: see page_release. */
static void clear_range(struct rps_store *s, struct rps_account *a, uint64_t from,
                        uint64_t to, bool keep_warm)
{
  while (from < to) {
    uint64_t li = from / LEAF_SLOTS;
    uint64_t leaf_end = (li + 1) * LEAF_SLOTS;
    uint64_t end = to < leaf_end ? to : leaf_end;
    leaf_clear_range(s, a, li, (uint32_t)(from % LEAF_SLOTS),
                     (uint32_t)(end - li * LEAF_SLOTS), keep_warm);
    from = end;
  }
  give_back_flush(s);
}

/* Resizes the root to nleaves entries; the caller has already emptied any leaf that
 * falls off the end. */
static int root_resize(struct rps_store *s, struct rps_account *a, uint64_t nleaves)
{
  if (nleaves == a->nleaves)
    return 0;
  if (nleaves == 0) {
    free(a->root);
    a->root = NULL;
  } else {
    struct leaf **root = realloc(a->root, nleaves * sizeof *root);
    if (!root)
      return -1;
    if (nleaves > a->nleaves)
      memset(root + a->nleaves, 0, (nleaves - a->nleaves) * sizeof *root);
    a->root = root;
  }
  s->meta_bytes -= a->nleaves * sizeof *a->root;
  s->meta_bytes += nleaves * sizeof *a->root;
  a->nleaves = nleaves;
  return 0;
}

void rps_account_destroy(struct rps_store *s, struct rps_account *a)
{
  if (!a)
    return;
  clear_range(s, a, 0, a->reserved, false);
  root_resize(s, a, 0);
  s->reserved -= a->reserved;
  s->meta_bytes -= sizeof *a;
  free(a);
}

enum rp_status rps_store_reserve(struct rps_store *s, struct rps_account *a, uint64_t pages,
                                 bool pressure, char *msg, size_t msglen)
{
  if (pages > a->reserved) {
    uint64_t more = pages - a->reserved;
    uint64_t free_pages = s->capacity - s->reserved;
    if (pressure) {
      snprintf(msg, msglen,
               "asked for %" PRIu64 " more pages, but this server's host is "
               "under memory pressure and takes no new pages: place them on another "
               "server",
               more);
      return RP_ERR_PRESSURE;
    }
    if (more > free_pages) {
      snprintf(msg, msglen,
               "asked for %" PRIu64 " pages (%" PRIu64 " more than this "
               "session holds), server has %" PRIu64 " free of %" PRIu64 ": ask for less, "
               "add a server, or raise --memory",
               pages, more, free_pages, s->capacity);
      return RP_ERR_NO_SPACE;
    }
  } else {
    clear_range(s, a, pages, a->reserved, false);
  }
  uint64_t nleaves = (pages + LEAF_SLOTS - 1) / LEAF_SLOTS;
  if (root_resize(s, a, nleaves) < 0) {
    /* Only growth allocates, and nothing has changed yet. */
    snprintf(msg, msglen, "the server is out of memory for slot tables: ask for less");
    return RP_ERR_INTERNAL;
  }
  s->reserved = s->reserved - a->reserved + pages;
  a->reserved = pages;
  return RP_OK;
}

static enum rp_status out_of_range(const struct rps_account *a, uint64_t slot, uint64_t count,
                                   char *msg, size_t msglen)
{
  if (count == 1)
    snprintf(msg, msglen,
             "slot %" PRIu64 " is outside this session's reservation of %" PRIu64
             " pages: reserve more first",
             slot, a->reserved);
  else
    snprintf(msg, msglen,
             "slots %" PRIu64 "..%" PRIu64 " reach outside this session's "
             "reservation of %" PRIu64 " pages: reserve more first",
             slot, slot + count - 1, a->reserved);
  return RP_ERR_OUT_OF_RANGE;
}

enum rp_status rps_store_write(struct rps_store *s, struct rps_account *a, uint64_t slot,
                               const uint8_t *page, char *msg, size_t msglen)
{
  if (slot >= a->reserved)
    return out_of_range(a, slot, 1, msg, msglen);
  uint64_t li = slot / LEAF_SLOTS;
  struct leaf *l = a->root[li];
  if (!l) {
    l = calloc(1, sizeof *l);
    if (!l)
      goto nomem;
    a->root[li] = l;
    s->meta_bytes += sizeof *l;
  }
  uint64_t *id = &l->ids[slot % LEAF_SLOTS];
  if (!*id) {
    *id = page_alloc(s);
    if (!*id) {
      if (l->used == 0)
        leaf_free(s, a, li);
      goto nomem;
    }
    l->used++;
    a->stored++;
  }
  memcpy(page_addr(s, *id), page, RP_PAGE_SIZE);
  return RP_OK;
nomem:
  snprintf(msg, msglen,
           "the server could not map memory for a page (its host is out of "
           "memory): place pages on another server");
  return RP_ERR_INTERNAL;
}

enum rp_status rps_store_read(const struct rps_store *s, const struct rps_account *a,
                              uint64_t slot, const uint8_t **page, char *msg, size_t msglen)
{
  if (slot >= a->reserved)
    return out_of_range(a, slot, 1, msg, msglen);
  const struct leaf *l = a->root[slot / LEAF_SLOTS];
  uint64_t id = l ? l->ids[slot % LEAF_SLOTS] : 0;
  if (!id) {
    snprintf(msg, msglen,
             "slot %" PRIu64 " holds no page: nothing was written there, or "
             "it was freed",
             slot);
    return RP_ERR_NOT_FOUND;
  }
  *page = page_addr(s, id);
  return RP_OK;
}

enum rp_status rps_store_free(struct rps_store *s, struct rps_account *a, uint64_t slot,
                              uint64_t count, char *msg, size_t msglen)
{
  if (count > a->reserved || slot > a->reserved - count)
    return out_of_range(a, slot, count, msg, msglen);
  clear_range(s, a, slot, slot + count, true);
  return RP_OK;
}
