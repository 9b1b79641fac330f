/* Per-address counts of unauthenticated connections (see admission.h). Entries exist
 * only while an address has a connection in its handshake, so the table is bounded by
 * --max-unauthenticated whatever the attacker does; chained buckets keep it simple. */
#include "admission.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#define BUCKETS 1024u /* a power of two */

struct entry {
  struct rps_addr_key key;
  uint32_t count;
  struct entry *next;
};

struct rps_addr_counts {
  struct entry *buckets[BUCKETS];
  uint32_t addresses;
  uint64_t seed; /* per process, so an attacker cannot aim its addresses at one bucket */
};

static uint32_t bucket_of(const struct rps_addr_counts *t, const struct rps_addr_key *key)
{
  uint64_t h = t->seed;
  for (size_t i = 0; i < sizeof key->bytes; i++)
    h = (h ^ key->bytes[i]) * UINT64_C(0x100000001b3);
  return (uint32_t)(h ^ (h >> 32)) & (BUCKETS - 1);
}

static struct entry **find(struct rps_addr_counts *t, const struct rps_addr_key *key)
{
  struct entry **e = &t->buckets[bucket_of(t, key)];
  while (*e && memcmp(&(*e)->key, key, sizeof *key) != 0)
    e = &(*e)->next;
  return e;
}

struct rps_addr_counts *rps_addr_counts_create(void)
{
  struct rps_addr_counts *t = calloc(1, sizeof *t);
  if (t)
    t->seed = UINT64_C(0xcbf29ce484222325) ^ (uint64_t)(uintptr_t)t;
  return t;
}

void rps_addr_counts_destroy(struct rps_addr_counts *t)
{
  if (!t)
    return;
  for (uint32_t b = 0; b < BUCKETS; b++) {
    while (t->buckets[b]) {
      struct entry *e = t->buckets[b];
      t->buckets[b] = e->next;
      free(e);
    }
  }
  free(t);
}

struct rps_addr_key rps_addr_key_of(const struct sockaddr_storage *ss)
{
  struct rps_addr_key k;
  memset(&k, 0, sizeof k);
  if (ss->ss_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
    k.bytes[10] = k.bytes[11] = 0xff;
    memcpy(k.bytes + 12, &in->sin_addr, 4);
  } else if (ss->ss_family == AF_INET6) {
    memcpy(k.bytes, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
  }
  return k;
}

uint32_t rps_addr_count(const struct rps_addr_counts *t, const struct rps_addr_key *key)
{
  struct entry *const *e = find((struct rps_addr_counts *)t, key);
  return *e ? (*e)->count : 0;
}

int rps_addr_count_add(struct rps_addr_counts *t, const struct rps_addr_key *key)
{
  struct entry **e = find(t, key);
  if (!*e) {
    struct entry *n = calloc(1, sizeof *n);
    if (!n)
      return -1;
    n->key = *key;
    *e = n;
    t->addresses++;
  }
  (*e)->count++;
  return 0;
}

void rps_addr_count_remove(struct rps_addr_counts *t, const struct rps_addr_key *key)
{
  struct entry **e = find(t, key);
  if (!*e)
    return;
  if (--(*e)->count == 0) {
    struct entry *gone = *e;
    *e = gone->next;
    free(gone);
    t->addresses--;
  }
}

uint32_t rps_addr_counts_addresses(const struct rps_addr_counts *t)
{
  return t->addresses;
}
