/* libFuzzer target for a state segment at takeover (src/state/state_segment_check.c):
 * the bytes a dead pager left in shared memory, which a standby reads before it serves.
 * The harness builds a valid state in memory (a header, two servers, a chunk of groups
 * with a sealed and an open one, the map and seals naming them, a write record, a parity
 * buffer); the input is a list of patches written over it:
 *   [area] [offset: 2 bytes, little endian] [length] [length bytes]   ...
 * area % 4 picks the header's fixed part and counters, the header's tables (servers,
 * writes, parity buffers, open group), the chunk's first groups, or the map and seals.
 * The header and records are then checked as a takeover checks them; a refusal must name
 * a field. A state that passes is taken over as a takeover does (group_table_adopt
 * over the map), and every index the replay follows is asserted in bounds: a state the
 * checks accept and the replay cannot index is a crash here. RAMPART_FUZZ_SEED_DIR=DIR
 * writes a seed corpus first. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity_group.h"
#include "state_segment.h"
#include "state_segment_check.h"
#include "state_segment_layout.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define PAGES 64u
#define RESERVED 32u
#define CHUNK_BYTES ((size_t)GROUP_CHUNK_SIZE * sizeof(struct group))
#define GROUPS_PATCHED 16u

static const struct state_segment_fingerprint fingerprint = {
  .pages = PAGES,
  .redundancy = 1,
  .group = 2,
  .encrypt = 1,
  .chunk_bytes = CHUNK_BYTES,
};
static uint8_t *valid_segment, *segment;
static struct group *valid_chunk, *chunk;
static size_t segment_bytes;

static void group_members(struct group *g, uint8_t state, unsigned members,
                          uint32_t first_page)
{
  *g = (struct group){ .state = state,
                       .capacity = 2,
                       .members = (uint8_t)members,
                       .has_parity = 1,
                       .buffer = GROUP_NO_BUFFER };
  for (unsigned m = 0; m <= GROUP_MAX_DATA; m++)
    g->server[m] = SERVER_INDEX_NONE;
  for (unsigned m = 0; m < members; m++) {
    g->server[m] = (server_index)m;
    g->slot[m] = first_page + m;
    g->page[m] = first_page + m;
  }
}

/* The state a pager serving two servers leaves: every record kind a takeover reads. */
static void build_valid_state(void)
{
  segment_bytes = state_segment_bytes(PAGES);
  valid_segment = calloc(1, segment_bytes);
  segment = malloc(segment_bytes);
  valid_chunk = calloc(1, CHUNK_BYTES);
  chunk = malloc(CHUNK_BYTES);
  if (!valid_segment || !segment || !valid_chunk || !chunk)
    abort();
  struct state_segment_header *h = (struct state_segment_header *)valid_segment;
  state_segment_header_init(h, &fingerprint);
  h->group_chunks = 1;
  h->group_chunk_segment[0] = 7;
  h->nservers = 2;
  for (unsigned s = 0; s < 2; s++) {
    snprintf(h->servers[s].address, sizeof h->servers[s].address, "127.0.0.1:%u", 7000 + s);
    h->servers[s].reserved_pages = RESERVED;
  }
  group_members(&valid_chunk[0], GROUP_SEALED, 2, 0);
  valid_chunk[0].server[2] = 1;
  valid_chunk[0].slot[2] = 20;
  group_members(&valid_chunk[1], GROUP_OPEN, 1, 2);
  valid_chunk[1].buffer = 0;
  h->open_group = 1;
  h->open_parity_server = 0;
  h->open_parity_slot = 21;
  h->parity[0] = (struct state_segment_parity){
    .group = 1, .published = STATE_SEGMENT_PARITY_PUBLISHED(0, 1)
  };
  page_entry *map = (page_entry *)(valid_segment + h->fixed.regions.map);
  struct page_seal *seals = (struct page_seal *)(valid_segment + h->fixed.regions.seals);
  map[0] = page_entry_remote(0, 0);
  map[1] = page_entry_remote(0, 1);
  map[2] = page_entry_remote(1, 0);
  map[3] = page_entry_slot(PAGE_SPILL, 3);
  for (unsigned p = 0; p < 4; p++)
    seals[p].version = h->next_version++;
  h->writes[0] = (struct state_segment_write){ .page = 4,
                                               .new_entry = page_entry_remote(1, 1),
                                               .joining = page_entry_remote(1, 1),
                                               .old_entry = 0,
                                               .active = 1 };
}

/* Where area `area` lies: its first byte and its length. */
static uint8_t *area_of(unsigned area, size_t *len)
{
  struct state_segment_header *h = (struct state_segment_header *)segment;
  switch (area % 4) {
  case 0:
    *len = offsetof(struct state_segment_header, servers);
    return segment;
  case 1:
    *len = sizeof *h - offsetof(struct state_segment_header, servers);
    return (uint8_t *)h->servers;
  case 2:
    *len = GROUPS_PATCHED * sizeof(struct group);
    return (uint8_t *)chunk;
  default: {
    struct state_segment_regions r = state_segment_regions_of(PAGES);
    *len = r.parity_pages - r.map;
    return segment + r.map;
  }
  }
}

static void apply_patches(const uint8_t *data, size_t size)
{
  while (size >= 4) {
    size_t len, offset = (size_t)data[1] | (size_t)data[2] << 8, n = data[3];
    uint8_t *area = area_of(data[0], &len);
    data += 4;
    size -= 4;
    if (n > size)
      n = size;
    if (area == (uint8_t *)((struct state_segment_header *)segment)->servers)
      offset = offset * 61 % len; /* reach every server entry and write record */
    offset %= len;
    if (n > len - offset)
      n = len - offset;
    memcpy(area + offset, data, n);
    data += n;
    size -= n;
  }
}

/* A version the replay follows: a group it can index, a member a group can have. */
static void check_followable(const struct group_table *t, page_entry e)
{
  if (page_entry_kind(e) != PAGE_REMOTE)
    return;
  if (page_entry_group(e) >= t->count || page_entry_member(e) >= GROUP_MAX_DATA)
    abort();
  const struct group *g = group_get(t, (uint32_t)page_entry_group(e));
  (void)g->server[page_entry_member(e)];
}

static void no_release(void *ctx, struct group *c)
{
  (void)ctx;
  (void)c;
}

/* What a takeover does with a state that passed: adopt the groups over the map, then
 * follow every map entry, write record, group member and parity buffer. */
static void take_over(struct state_segment_header *h, uint32_t nchunks)
{
  struct state_segment st;
  memset(&st, 0, sizeof st);
  state_segment_view(&st, segment);
  struct page_map map;
  page_map_init_at(&map, PAGES, st.map);
  struct group_chunk_source source = { NULL, no_release, NULL };
  struct group_table t;
  struct group *chunks[1] = { chunk };
  if (group_table_adopt(&t, chunks, nchunks, &source, &map) < 0)
    abort();
  for (uint64_t p = 0; p < PAGES; p++)
    check_followable(&t, page_map_get(&map, p));
  for (unsigned i = 0; i < STATE_SEGMENT_WRITES; i++)
    if (st.writes[i].active) {
      if (st.writes[i].page >= PAGES)
        abort();
      check_followable(&t, st.writes[i].new_entry);
      check_followable(&t, st.writes[i].joining);
      check_followable(&t, st.writes[i].old_entry);
    }
  for (uint32_t id = 0; id < t.count; id++) {
    const struct group *g = group_get(&t, id);
    if (g->state == GROUP_FREE)
      continue;
    if (g->members > g->capacity || g->capacity > GROUP_MAX_DATA)
      abort();
    for (unsigned m = 0; m <= g->capacity; m++) {
      unsigned s = g->server[m];
      if ((m < g->members || (m == g->capacity && g->has_parity)) && s != SERVER_INDEX_NONE &&
          (s >= h->nservers || g->slot[m] >= h->servers[s].reserved_pages))
        abort();
    }
    if ((g->state == GROUP_OPEN || g->state == GROUP_SEALING) &&
        g->buffer != GROUP_NO_BUFFER && g->buffer >= STATE_SEGMENT_PARITY_BUFFERS)
      abort();
  }
  if (*st.open_group != GROUP_NONE && *st.open_group >= t.count)
    abort();
  for (unsigned s = 0; s < *st.nservers; s++)
    if (!memchr(st.servers[s].address, '\0', sizeof st.servers[s].address))
      abort();
  group_table_destroy(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size > 4096)
    return 0;
  memcpy(segment, valid_segment, segment_bytes);
  memcpy(chunk, valid_chunk, CHUNK_BYTES);
  apply_patches(data, size);
  struct state_segment_header *h = (struct state_segment_header *)segment;
  char err[1024] = "";
  if (state_segment_check_header(h, segment_bytes, &fingerprint, err, sizeof err) < 0) {
    if (!strstr(err, "field"))
      abort();
    return 0;
  }
  /* A takeover maps exactly the chunks the header counts: this harness has one. */
  if (h->group_chunks > 1)
    return 0;
  struct group *chunks[1] = { chunk };
  const page_entry *map = (const page_entry *)(segment + h->fixed.regions.map);
  const struct page_seal *seals = (const struct page_seal *)(segment +
                                                             h->fixed.regions.seals);
  if (state_segment_check_records(h, map, seals, chunks, h->group_chunks, err, sizeof err) <
      0) {
    if (!strstr(err, "field"))
      abort();
    return 0;
  }
  take_over(h, h->group_chunks);
  return 0;
}

static void seed(const char *dir, const char *name, const uint8_t *bytes, size_t len)
{
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "we");
  if (!f)
    return;
  fwrite(bytes, 1, len, f);
  fclose(f);
}

/* One patch: area, offset, then the value's bytes. */
static size_t patch(uint8_t *out, unsigned area, unsigned offset, const void *value,
                    size_t len)
{
  out[0] = (uint8_t)area;
  out[1] = (uint8_t)(offset & 0xff);
  out[2] = (uint8_t)(offset >> 8);
  out[3] = (uint8_t)len;
  memcpy(out + 4, value, len);
  return 4 + len;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  build_valid_state();
  const char *dir = getenv("RAMPART_FUZZ_SEED_DIR");
  if (!dir || !*dir)
    return 0;
  uint8_t buf[64];
  seed(dir, "valid", buf, 0);
  uint64_t far = UINT64_C(1) << 40;
  seed(dir, "map-offset", buf,
       patch(buf, 0, offsetof(struct state_segment_header, fixed.regions.map), &far, 8));
  uint32_t many = STATE_SEGMENT_MAX_CHUNKS + 1;
  seed(dir, "group-chunks", buf,
       patch(buf, 0, offsetof(struct state_segment_header, group_chunks), &many, 4));
  uint8_t members = GROUP_MAX_DATA + 1;
  seed(dir, "group-members", buf,
       patch(buf, 2, offsetof(struct group, members), &members, 1));
  server_index server = 9;
  seed(dir, "group-server", buf,
       patch(buf, 2, offsetof(struct group, server), &server, sizeof server));
  page_entry beyond = page_entry_remote(GROUP_CHUNK_SIZE, 0);
  seed(dir, "map-entry", buf, patch(buf, 3, 2 * sizeof(page_entry), &beyond, sizeof beyond));
  return 0;
}
