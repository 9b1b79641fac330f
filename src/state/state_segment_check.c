/* The checks a state segment passes before a takeover uses it (state_segment_check.h):
 * the header against the layout computed from the device's geometry, then the records a
 * takeover replays against their bounds. Every refusal names the field. */
#include "state_segment_check.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "parity_group.h"
#include "rampart_types.h"
#include "server_index.h"

__attribute__((format(printf, 3, 4))) static int refuse(char *err, size_t errlen,
                                                        const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}

/* ---- the header ------------------------------------------------------------------------ */

/* One line per region of struct state_segment_regions. */
static const struct region_field {
  const char *name;
  size_t offset;
} region_fields[] = {
  { "map_offset", offsetof(struct state_segment_regions, map) },
  { "seals_offset", offsetof(struct state_segment_regions, seals) },
  { "parity_offset", offsetof(struct state_segment_regions, parity_pages) },
  { "op_pages_offset", offsetof(struct state_segment_regions, op_pages) },
  { "total_bytes", offsetof(struct state_segment_regions, total) },
};
_Static_assert(sizeof region_fields / sizeof region_fields[0] * sizeof(uint64_t) ==
                 sizeof(struct state_segment_regions),
               "every region of the layout has its line in region_fields");

static uint64_t region_at(const struct state_segment_regions *r, size_t offset)
{
  uint64_t v;
  memcpy(&v, (const uint8_t *)r + offset, sizeof v);
  return v;
}

static int check_version(const struct state_segment_fixed *f, char *err, size_t errlen)
{
  if (memcmp(f->magic, STATE_MAGIC, sizeof f->magic) != 0)
    return refuse(err, errlen, "it is not a pager state (field magic is not rampart's)");
  if (f->layout != STATE_LAYOUT)
    return refuse(err, errlen,
                  "it is not a pager state of this version (layout %u, this "
                  "build reads %u; field layout)",
                  f->layout, STATE_LAYOUT);
  if (f->header_bytes != STATE_HEADER_BYTES)
    return refuse(err, errlen,
                  "its header is %u bytes, this build's %zu (field "
                  "header_bytes)",
                  f->header_bytes, (size_t)STATE_HEADER_BYTES);
  return 0;
}

static int check_fingerprint(const struct state_segment_fingerprint *was,
                             const struct state_segment_fingerprint *now, char *err,
                             size_t errlen)
{
  static const char also[] = "; start it with the settings it was attached with, or give "
                             "this device a state= path of its own";
  if (was->pages != now->pages)
    return refuse(err, errlen,
                  "it belongs to another device: its size is %" PRIu64 " MiB, "
                  "this device's %" PRIu64 " MiB (field fingerprint.pages)%s",
                  was->pages >> 8, now->pages >> 8, also);
  if (was->redundancy != now->redundancy || was->group != now->group)
    return refuse(err, errlen,
                  "it belongs to another device: its redundancy is %u with "
                  "groups of %u, this device's %u with groups of %u (field "
                  "fingerprint.%s)%s",
                  was->redundancy, was->group, now->redundancy, now->group,
                  was->redundancy != now->redundancy ? "redundancy" : "group", also);
  if (was->encrypt != now->encrypt)
    return refuse(err, errlen,
                  "it belongs to another device: it was written with "
                  "encrypt=%s, this device has encrypt=%s (field fingerprint.encrypt)%s",
                  was->encrypt ? "on" : "off", now->encrypt ? "on" : "off", also);
  if (was->chunk_bytes != now->chunk_bytes)
    return refuse(err, errlen,
                  "another build of rampart wrote it (group records of %u "
                  "bytes a chunk, this build's %u; field fingerprint.chunk_bytes)",
                  was->chunk_bytes, now->chunk_bytes);
  return 0;
}

/* Every region where the layout computed from the (checked) geometry puts it. */
static int check_regions(const struct state_segment_regions *r, uint64_t pages,
                         uint64_t bytes, char *err, size_t errlen)
{
  struct state_segment_regions want = state_segment_regions_of(pages);
  for (size_t i = 0; i < sizeof region_fields / sizeof region_fields[0]; i++) {
    uint64_t is = region_at(r, region_fields[i].offset);
    uint64_t expected = region_at(&want, region_fields[i].offset);
    if (is != expected)
      return refuse(err, errlen,
                    "its header is corrupt: field %s is %" PRIu64 ", the "
                    "layout of %" PRIu64 " pages puts it at %" PRIu64,
                    region_fields[i].name, is, pages, expected);
  }
  if (r->total != bytes)
    return refuse(err, errlen,
                  "its header is corrupt: field total_bytes is %" PRIu64
                  ", the segment has %" PRIu64 " bytes",
                  r->total, bytes);
  return 0;
}

static int check_counters(const struct state_segment_header *h, char *err, size_t errlen)
{
  /* generation is counted up at each attach, next_version at each seal: 0 is never
   * written, and the top value would wrap. */
  if (h->generation == 0 || h->generation == UINT64_MAX)
    return refuse(err, errlen, "its header is corrupt: field generation is %" PRIu64,
                  h->generation);
  if (h->next_version == 0 || h->next_version >= UINT64_MAX / 2)
    return refuse(err, errlen,
                  "its header is corrupt: field next_version is %" PRIu64
                  " (the nonce counter)",
                  h->next_version);
  if (h->group_chunks > STATE_SEGMENT_MAX_CHUNKS)
    return refuse(err, errlen,
                  "its header is corrupt: field group_chunks is %u, at most "
                  "%u",
                  h->group_chunks, STATE_SEGMENT_MAX_CHUNKS);
  for (uint32_t i = 0; i < h->group_chunks; i++)
    if (h->group_chunk_segment[i] < 0)
      return refuse(err, errlen,
                    "its header is corrupt: field group_chunk_segment[%u] is "
                    "%d, a segment id",
                    i, (int)h->group_chunk_segment[i]);
  if (h->nservers > STATE_SEGMENT_SERVERS)
    return refuse(err, errlen, "its header is corrupt: field nservers is %u, at most %u",
                  h->nservers, STATE_SEGMENT_SERVERS);
  return 0;
}

#define SERVER_FLAGS_KNOWN ((STATE_SEGMENT_SERVER_REBUILD_NEEDED << 1) - 1u)

static int check_servers(const struct state_segment_header *h, char *err, size_t errlen)
{
  for (uint32_t i = 0; i < h->nservers; i++) {
    const struct state_segment_server *s = &h->servers[i];
    const char *field = NULL;
    if (!memchr(s->address, '\0', sizeof s->address))
      field = "address";
    else if (s->addr_len > sizeof s->addr)
      field = "addr_len";
    else if (s->state > RAMPART_SERVER_REMOVED)
      field = "state";
    else if (s->flags & ~SERVER_FLAGS_KNOWN)
      field = "flags";
    else if (s->reserved_pages > UINT32_MAX)
      field = "reserved_pages";
    if (field)
      return refuse(err, errlen,
                    "its server table is corrupt: field servers[%u].%s is out "
                    "of its bounds",
                    i, field);
  }
  return 0;
}

static int check_tables(const struct state_segment_header *h, uint64_t pages, char *err,
                        size_t errlen)
{
  for (uint32_t i = 0; i < STATE_SEGMENT_WRITES; i++) {
    const struct state_segment_write *w = &h->writes[i];
    if (w->active > 1)
      return refuse(err, errlen,
                    "its write records are corrupt: field writes[%u].active "
                    "is %u",
                    i, w->active);
    if (w->active && w->page >= pages)
      return refuse(err, errlen,
                    "its write records are corrupt: field writes[%u].page is "
                    "%" PRIu64 ", the device has %" PRIu64 " pages",
                    i, w->page, pages);
  }
  for (uint32_t i = 0; i < STATE_SEGMENT_PARITY_BUFFERS; i++)
    if (STATE_SEGMENT_PARITY_COVERED(h->parity[i].published) > GROUP_MAX_DATA + 1u)
      return refuse(err, errlen,
                    "its parity buffers are corrupt: field "
                    "parity[%u].published covers %u members, a group has at most %u",
                    i, STATE_SEGMENT_PARITY_COVERED(h->parity[i].published), GROUP_MAX_DATA);
  if (h->open_group != GROUP_NONE &&
      h->open_group >= (uint64_t)h->group_chunks * GROUP_CHUNK_SIZE)
    return refuse(err, errlen,
                  "its header is corrupt: field open_group is %u, the state "
                  "has %u groups",
                  h->open_group, h->group_chunks * GROUP_CHUNK_SIZE);
  if (h->rebuild.running > 1 || h->rebuild.finished > 1)
    return refuse(err, errlen, "its header is corrupt: field rebuild.%s is not 0 or 1",
                  h->rebuild.running > 1 ? "running" : "finished");
  return 0;
}

int state_segment_check_header(const struct state_segment_header *h, uint64_t bytes,
                               const struct state_segment_fingerprint *fp, char *err,
                               size_t errlen)
{
  if (bytes < STATE_HEADER_BYTES)
    return refuse(err, errlen,
                  "it is not a pager state (a segment of %" PRIu64 " bytes, "
                  "smaller than the header)",
                  bytes);
  const struct state_segment_fixed *f = &h->fixed;
  if (check_version(f, err, errlen) < 0 ||
      check_fingerprint(&f->fingerprint, fp, err, errlen) < 0 ||
      check_regions(&f->regions, f->fingerprint.pages, bytes, err, errlen) < 0 ||
      check_counters(h, err, errlen) < 0 || check_servers(h, err, errlen) < 0 ||
      check_tables(h, f->fingerprint.pages, err, errlen) < 0)
    return -1;
  return 0;
}

/* ---- the records ---------------------------------------------------------------------- */

struct record_bounds {
  const struct state_segment_header *h;
  struct group *const *chunks;
  uint64_t pages;
  uint32_t groups; /* the group ids the chunks mapped hold */
};

static const struct group *group_at(const struct record_bounds *b, uint32_t id)
{
  return &b->chunks[id >> GROUP_CHUNK_SHIFT][id & (GROUP_CHUNK_SIZE - 1)];
}

/* A slot of server `server` (SERVER_INDEX_NONE: not stored): a server the table has,
 * and a slot of those it reserved. NULL, or the field that is wrong. */
static const char *check_placement(const struct record_bounds *b, unsigned server,
                                   uint32_t slot)
{
  if (server == SERVER_INDEX_NONE)
    return NULL;
  if (server >= b->h->nservers)
    return "server";
  if (slot >= b->h->servers[server].reserved_pages)
    return "slot";
  return NULL;
}

/* The first field of group id that is out of its bounds, in `field`; "" when none is. */
static void group_field_out_of_bounds(const struct record_bounds *b, const struct group *g,
                                      char *field, size_t fieldlen)
{
  const char *what = NULL;
  if (g->state > GROUP_SEALED)
    what = "state";
  else if (g->state == GROUP_FREE)
    return;
  else if (g->capacity < 1 || g->capacity > GROUP_MAX_DATA)
    what = "capacity";
  else if (g->members > g->capacity)
    what = "members";
  else if (g->has_parity > 1)
    what = "has_parity";
  else if (g->parities > GROUP_MAX_PARITY)
    what = "parities";
  else if (g->absent >> (g->capacity + GROUP_MAX_PARITY))
    what = "absent";
  else if (g->unprotected > 1)
    what = "unprotected";
  else if ((g->state == GROUP_OPEN || g->state == GROUP_SEALING) &&
           g->buffer != GROUP_NO_BUFFER && g->buffer >= STATE_SEGMENT_PARITY_BUFFERS)
    what = "buffer";
  if (what) {
    snprintf(field, fieldlen, "%s", what);
    return;
  }
  for (unsigned m = 0; m < g->members; m++) {
    what = check_placement(b, g->server[m], g->slot[m]);
    if (!what && g->page[m] >= b->pages)
      what = "page";
    if (what) {
      snprintf(field, fieldlen, "%s[%u]", what, m);
      return;
    }
  }
  if (!g->has_parity)
    return;
  /* P, then Q under parity=2; an open group keeps the slot it reserved for Q aside. */
  unsigned q = g->state == GROUP_OPEN ? GROUP_Q_RESERVED : g->capacity + 1u;
  if ((what = check_placement(b, g->server[g->capacity], g->slot[g->capacity])) != NULL)
    snprintf(field, fieldlen, "%s[%u] (its parity)", what, g->capacity);
  else if (g->parities == 2 && (what = check_placement(b, g->server[q], g->slot[q])) != NULL)
    snprintf(field, fieldlen, "%s[%u] (its Q)", what, q);
}

static int check_group(const struct record_bounds *b, uint32_t id, char *err, size_t errlen)
{
  const struct group *g = group_at(b, id);
  char field[48] = "";
  group_field_out_of_bounds(b, g, field, sizeof field);
  if (!field[0])
    return 0;
  return refuse(err, errlen,
                "its group table is corrupt: field groups[%u].%s is out of its "
                "bounds (members %u, capacity %u, a group has at most %u; %u servers)",
                id, field, g->members, g->capacity, GROUP_MAX_DATA, b->h->nservers);
}

/* A version a record names: a group's member the chunks hold, a spill slot, or zero. */
static bool entry_in_bounds(const struct record_bounds *b, page_entry entry)
{
  switch (page_entry_kind(entry)) {
  case PAGE_ZERO:
    return entry == 0;
  case PAGE_REMOTE:
    return page_entry_group(entry) < b->groups && page_entry_member(entry) < GROUP_MAX_DATA;
  case PAGE_SPILL:
    return true; /* the spill store bounds its slots when it claims them */
  case PAGE_LOCAL:
  default:
    return false; /* the local RAM store does not outlive the process */
  }
}

static int check_versions(const struct record_bounds *b, const page_entry *map,
                          const struct page_seal *seals, char *err, size_t errlen)
{
  uint64_t next = b->h->next_version;
  for (uint64_t p = 0; p < b->pages; p++) {
    if (!entry_in_bounds(b, map[p]))
      return refuse(err, errlen,
                    "its page map is corrupt: field map[%" PRIu64 "] names "
                    "no place a page can be (entry %#" PRIx64 ")",
                    p, map[p]);
    if (seals[p].version >= next)
      return refuse(err, errlen,
                    "its seals are corrupt: field seals[%" PRIu64 "].version "
                    "is %" PRIu64 ", past the nonce counter %" PRIu64,
                    p, seals[p].version, next);
  }
  for (uint32_t i = 0; i < STATE_SEGMENT_WRITES; i++) {
    const struct state_segment_write *w = &b->h->writes[i];
    if (!w->active)
      continue;
    const char *field = !entry_in_bounds(b, w->new_entry)   ? "new_entry"
                        : !entry_in_bounds(b, w->joining)   ? "joining"
                        : !entry_in_bounds(b, w->old_entry) ? "old_entry"
                        : w->old_seal.version >= next       ? "old_seal.version"
                                                            : NULL;
    if (field)
      return refuse(err, errlen,
                    "its write records are corrupt: field writes[%u].%s is "
                    "out of its bounds",
                    i, field);
  }
  return 0;
}

/* The open group's parity slot, reserved when it opened, is a slot of its parity server;
 * a server index the table lacks is left to the engine, which seals the group without
 * parity then. */
static int check_open_parity(const struct record_bounds *b, char *err, size_t errlen)
{
  const struct state_segment_header *h = b->h;
  if (h->open_group == GROUP_NONE || h->open_group >= b->groups)
    return 0;
  const struct group *g = group_at(b, h->open_group);
  if (g->state != GROUP_OPEN || !g->has_parity || h->open_parity_server >= h->nservers)
    return 0;
  if (h->open_parity_slot >= h->servers[h->open_parity_server].reserved_pages)
    return refuse(err, errlen,
                  "its header is corrupt: field open_parity_slot is %u, server "
                  "%u reserved %" PRIu64 " slots",
                  h->open_parity_slot, h->open_parity_server,
                  h->servers[h->open_parity_server].reserved_pages);
  return 0;
}

int state_segment_check_records(const struct state_segment_header *h, const page_entry *map,
                                const struct page_seal *seals, struct group *const *chunks,
                                uint32_t nchunks, char *err, size_t errlen)
{
  struct record_bounds b = { .h = h,
                             .chunks = chunks,
                             .pages = h->fixed.fingerprint.pages,
                             .groups = nchunks * GROUP_CHUNK_SIZE };
  for (uint32_t id = 0; id < b.groups; id++)
    if (check_group(&b, id, err, errlen) < 0)
      return -1;
  if (check_open_parity(&b, err, errlen) < 0)
    return -1;
  return check_versions(&b, map, seals, err, errlen);
}
