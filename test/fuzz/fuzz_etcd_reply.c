/* libFuzzer target for the etcd gateway's replies (etcd/etcd_reply.c), which come from
 * whatever answers on an endpoint. The first input byte picks the parser: even, a range
 * read's page; odd, a watch stream, fed line by line as the client feeds it. A reply
 * taken must hand on only keys and values that fit, and revisions a revision can follow;
 * a reply refused must say why and hand on nothing. Seeds: test/fuzz/corpus/etcd_reply
 * (pages and watch messages as etcd writes them, and lies). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_libs.h"
#include "etcd_reply.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static unsigned handed;

static void check_kv(const char *key, const char *value)
{
  if (strlen(key) > RP_ETCD_KEY_MAX || strlen(value) > RP_ETCD_VALUE_MAX)
    abort();
  handed++;
}

static void on_kv(void *arg, const char *key, const char *value)
{
  check_kv(key, value);
}

static void on_event(void *arg, bool deleted, const char *key, const char *value)
{
  check_kv(key, value);
}

static void range(char *text)
{
  struct rp_etcd_range_page page;
  char why[200] = "";
  handed = 0;
  if (rp_etcd_reply_range(text, on_kv, NULL, &page, why, sizeof why) < 0) {
    if (!why[0] || handed)
      abort();
    return;
  }
  if (page.revision < 1 || page.revision == INT64_MAX || handed > page.count ||
      (page.more && (page.count == 0 || page.last_key_len > RP_ETCD_KEY_MAX)))
    abort();
}

static void watch(char *text)
{
  struct rp_etcd_watch_reply w = { .next_revision = 0 };
  for (char *line = text, *nl; line; line = nl ? nl + 1 : NULL) {
    nl = strchr(line, '\n');
    if (nl)
      *nl = '\0';
    char why[200] = "";
    int64_t before = w.next_revision;
    handed = 0;
    if (rp_etcd_reply_watch(line, on_event, NULL, &w, why, sizeof why) < 0) {
      if (!why[0] || handed || w.next_revision != before)
        abort();
      return; /* the client leaves an endpoint at its first wrong message */
    }
    if (w.next_revision < 0 || (w.canceled && !why[0]))
      abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 1 || size > 65536)
    return 0;
  char *text = malloc(size);
  if (!text)
    abort();
  memcpy(text, data + 1, size - 1);
  text[size - 1] = '\0';
  if (data[0] % 2 == 0)
    range(text);
  else
    watch(text);
  free(text);
  return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  char err[300];
  if (rp_etcd_libs_load(err, sizeof err) < 0) {
    fprintf(stderr, "fuzz_etcd_reply: %s\n", err);
    exit(1);
  }
  return 0;
}
