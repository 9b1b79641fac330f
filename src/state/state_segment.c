/* The pager's state segment (see state_segment.h, docs/recovery.md). */
#include "state_segment.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/file.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "auth.h"
#include "file_create.h"
#include "state_segment_check.h"

#define ANCHOR_FIRST_LINE "rampart pager state 1"
#define WRAP_LABEL "rampart state key wrap v1"

/* Creates a segment of `bytes`, locked as a segment (not through a mapping: it stays
 * resident with no process attached, between a crash and the restart), and maps it.
 * The segment's id, or -1 with errno. */
static int locked_segment_new(size_t bytes, void **base)
{
  int id = shmget(IPC_PRIVATE, bytes, IPC_CREAT | IPC_EXCL | 0600);
  if (id < 0)
    return -1;
  int saved;
  if (shmctl(id, SHM_LOCK, NULL) < 0) {
    saved = errno;
  } else if ((*base = shmat(id, NULL, 0)) == (void *)-1) {
    saved = errno;
  } else {
    return id;
  }
  shmctl(id, IPC_RMID, NULL);
  errno = saved;
  return -1;
}

const char *state_segment_layout(void)
{
  static char layout[32];
  snprintf(layout, sizeof layout, "%u.%zu", STATE_LAYOUT,
           (size_t)GROUP_CHUNK_SIZE * sizeof(struct group));
  return layout;
}

uint64_t state_segment_bytes(uint64_t pages)
{
  return state_segment_regions_of(pages).total;
}

/* ---- the anchor file ------------------------------------------------------------------ */

struct anchor {
  int segment;
  uint8_t identity[STATE_SEGMENT_IDENTITY_LEN];
};

static void identity_hex(const uint8_t *id, char out[2 * STATE_SEGMENT_IDENTITY_LEN + 1])
{
  for (unsigned i = 0; i < STATE_SEGMENT_IDENTITY_LEN; i++)
    snprintf(out + 2 * i, 3, "%02x", id[i]);
}

/* 1 read, 0 no file, -1 unreadable or not an anchor (err says so). */
static int anchor_read(const char *path, struct anchor *a, char *err, size_t errlen)
{
  int fd = rp_file_open_read(path);
  FILE *f = fd >= 0 ? fdopen(fd, "re") : NULL;
  if (!f) {
    int e = errno;
    if (fd >= 0)
      close(fd);
    if (e == ENOENT)
      return 0;
    snprintf(err, errlen, "cannot read the state file %s: %s", path, rp_file_why(e));
    return -1;
  }
  char first[64] = "", hex[2 * STATE_SEGMENT_IDENTITY_LEN + 1] = "";
  int segment = -1;
  bool ok = fgets(first, sizeof first, f) != NULL &&
            strncmp(first, ANCHOR_FIRST_LINE "\n", sizeof first) == 0 &&
            fscanf(f, "segment %d\nidentity %32s\n", &segment, hex) == 2 && segment >= 0 &&
            strlen(hex) == 2 * STATE_SEGMENT_IDENTITY_LEN;
  fclose(f);
  for (unsigned i = 0; ok && i < STATE_SEGMENT_IDENTITY_LEN; i++) {
    unsigned byte;
    ok = sscanf(hex + 2 * i, "%2x", &byte) == 1;
    a->identity[i] = (uint8_t)byte;
  }
  if (!ok) {
    snprintf(err, errlen,
             "%s is not a rampart state file (it should start '%s'): give "
             "state= a path of its own, or remove the file to start empty",
             path, ANCHOR_FIRST_LINE);
    return -1;
  }
  a->segment = segment;
  return 1;
}

/* Written beside the old one and renamed over it, so a crash leaves one or the other. */
static int anchor_write(const char *path, const struct anchor *a, char *err, size_t errlen)
{
  char tmp[4200], hex[2 * STATE_SEGMENT_IDENTITY_LEN + 1];
  snprintf(tmp, sizeof tmp, "%s.new", path);
  identity_hex(a->identity, hex);
  int fd = rp_file_create(tmp, 0600);
  if (fd < 0) {
    snprintf(err, errlen,
             "cannot write the state file %s: %s (state= must name a file "
             "in a directory this user can write, such as /run/rampart/NAME/state)",
             tmp, rp_file_why(errno));
    return -1;
  }
  char text[160];
  int n = snprintf(text, sizeof text, ANCHOR_FIRST_LINE "\nsegment %d\nidentity %s\n",
                   a->segment, hex);
  bool ok = write(fd, text, (size_t)n) == n && fsync(fd) == 0;
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp, path) < 0) {
    snprintf(err, errlen, "cannot write the state file %s: %s", path, strerror(errno));
    unlink(tmp);
    return -1;
  }
  return 0;
}

/* ---- the wrapped device key ------------------------------------------------------------ */

static bool wrapping_key(const uint8_t *master, size_t master_len,
                         const uint8_t identity[STATE_SEGMENT_IDENTITY_LEN],
                         uint8_t key[PAGE_SEAL_KEY_LEN])
{
  uint8_t msg[sizeof WRAP_LABEL - 1 + STATE_SEGMENT_IDENTITY_LEN];
  memcpy(msg, WRAP_LABEL, sizeof WRAP_LABEL - 1);
  memcpy(msg + sizeof WRAP_LABEL - 1, identity, STATE_SEGMENT_IDENTITY_LEN);
  static const uint8_t no_key[1];
  unsigned len = PAGE_SEAL_KEY_LEN;
  return HMAC(EVP_sha256(), master ? master : no_key, master ? (int)master_len : 0, msg,
              sizeof msg, key, &len) != NULL;
}

/* AES-256-GCM over the 32-byte device key, the header's fixed part (the identity, the
 * geometry and the regions) as additional data, so the tag verifies only for the key
 * and the header its pager wrote. encrypt: plain -> the header's wrapped_key and tag;
 * else the header's -> plain, false when the tag does not verify (another key, or a
 * fixed field changed). */
static bool wrap_device_key(struct state_segment_header *h, const uint8_t *master,
                            size_t master_len, uint8_t plain[PAGE_SEAL_KEY_LEN], bool encrypt)
{
  uint8_t key[PAGE_SEAL_KEY_LEN];
  if (!wrapping_key(master, master_len, h->fixed.identity, key))
    return false;
  EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
  int len = 0;
  bool ok = ctx != NULL;
  if (encrypt) {
    ok = ok && EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, key, h->wrap_nonce) == 1 &&
         EVP_EncryptUpdate(ctx, NULL, &len, (const uint8_t *)&h->fixed, sizeof h->fixed) ==
           1 &&
         EVP_EncryptUpdate(ctx, h->wrapped_key, &len, plain, PAGE_SEAL_KEY_LEN) == 1 &&
         EVP_EncryptFinal_ex(ctx, h->wrapped_key + len, &len) == 1 &&
         EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, STATE_WRAP_TAG_LEN, h->wrap_tag) == 1;
  } else {
    ok =
      ok && EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, key, h->wrap_nonce) == 1 &&
      EVP_DecryptUpdate(ctx, NULL, &len, (const uint8_t *)&h->fixed, sizeof h->fixed) == 1 &&
      EVP_DecryptUpdate(ctx, plain, &len, h->wrapped_key, PAGE_SEAL_KEY_LEN) == 1 &&
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, STATE_WRAP_TAG_LEN, h->wrap_tag) == 1 &&
      EVP_DecryptFinal_ex(ctx, plain + len, &len) == 1;
    if (!ok)
      OPENSSL_cleanse(plain, PAGE_SEAL_KEY_LEN);
  }
  EVP_CIPHER_CTX_free(ctx);
  OPENSSL_cleanse(key, sizeof key);
  return ok;
}

/* ---- the segment -------------------------------------------------------------------------- */

void state_segment_view(struct state_segment *st, void *base)
{
  struct state_segment_header *h = base;
  const struct state_segment_regions *r = &h->fixed.regions;
  st->base = base;
  st->header = h;
  st->map = (page_entry *)((uint8_t *)base + r->map);
  st->seals = (struct page_seal *)((uint8_t *)base + r->seals);
  st->next_version = &h->next_version;
  st->nservers = &h->nservers;
  st->servers = h->servers;
  st->writes = h->writes;
  st->parity = h->parity;
  st->parity_pages = (uint8_t *)base + r->parity_pages;
  st->parity_q_pages = st->parity_pages + (size_t)2 * STATE_SEGMENT_PARITY_BUFFERS * 4096u;
  st->op_pages = (uint8_t *)base + r->op_pages;
  st->rebuild = &h->rebuild;
  st->open_group = &h->open_group;
  st->open_parity_server = &h->open_parity_server;
  st->open_parity_slot = &h->open_parity_slot;
  st->generation = h->generation;
  memcpy(st->identity, h->fixed.identity, STATE_SEGMENT_IDENTITY_LEN);
}

/* st points into no segment. */
static void state_segment_view_clear(struct state_segment *st)
{
  st->base = NULL;
  st->header = NULL;
  st->map = NULL;
  st->seals = NULL;
  st->next_version = NULL;
  st->nservers = NULL;
  st->servers = NULL;
  st->writes = NULL;
  st->parity = NULL;
  st->parity_pages = NULL;
  st->parity_q_pages = NULL;
  st->op_pages = NULL;
  st->open_group = st->open_parity_server = st->open_parity_slot = NULL;
  st->rebuild = NULL;
}

void state_segment_header_init(struct state_segment_header *h,
                               const struct state_segment_fingerprint *fp)
{
  memcpy(h->fixed.magic, STATE_MAGIC, sizeof h->fixed.magic);
  h->fixed.layout = STATE_LAYOUT;
  h->fixed.header_bytes = STATE_HEADER_BYTES;
  h->fixed.fingerprint = *fp;
  h->fixed.regions = state_segment_regions_of(fp->pages);
  h->generation = 1;
  h->next_version = 1;
  h->open_group = UINT32_MAX;
  for (unsigned i = 0; i < STATE_SEGMENT_MAX_CHUNKS; i++)
    h->group_chunk_segment[i] = -1;
}

/* The kernel destroys every segment its creator leaves when this is 1, which would
 * make a crash lose the state it is kept for. */
static int check_segments_outlive_processes(char *err, size_t errlen)
{
  FILE *f = fopen("/proc/sys/kernel/shm_rmid_forced", "re");
  int forced = 0;
  if (f) {
    if (fscanf(f, "%d", &forced) != 1)
      forced = 0;
    fclose(f);
  }
  if (forced) {
    snprintf(err, errlen,
             "kernel.shm_rmid_forced=1 makes the kernel destroy the pager's "
             "state when the pager exits, so a restart would find nothing: set "
             "'sysctl kernel.shm_rmid_forced=0', or leave state= unset");
    return -1;
  }
  return 0;
}

static int create_state(struct state_segment *st, const struct state_segment_fingerprint *fp,
                        const uint8_t *master, size_t master_len,
                        uint8_t device_key[PAGE_SEAL_KEY_LEN], char *err, size_t errlen)
{
  uint64_t bytes = state_segment_bytes(fp->pages);
  void *base = NULL;
  int id = locked_segment_new(bytes, &base);
  if (id < 0) {
    snprintf(err, errlen,
             "cannot create and lock the %" PRIu64 " MiB state segment: %s "
             "(for EPERM or ENOMEM raise LimitMEMLOCK= in the unit or 'ulimit -l', or run "
             "with CAP_IPC_LOCK; for EINVAL or ENOSPC raise kernel.shmmax / kernel.shmall; "
             "or leave state= unset)",
             bytes >> 20, strerror(errno));
    return -1;
  }
  struct state_segment_header *h = base;
  state_segment_header_init(h, fp);
  bool ok = rp_random_bytes(h->fixed.identity, sizeof h->fixed.identity) == 0 &&
            rp_random_bytes(h->wrap_nonce, sizeof h->wrap_nonce) == 0 &&
            rp_random_bytes(device_key, PAGE_SEAL_KEY_LEN) == 0 &&
            wrap_device_key(h, master, master_len, device_key, true);
  struct anchor a = { .segment = id };
  memcpy(a.identity, h->fixed.identity, sizeof a.identity);
  if (!ok) {
    snprintf(err, errlen, "cannot draw and wrap a device key (getrandom or OpenSSL failed)");
  } else if (anchor_write(st->path, &a, err, errlen) == 0) {
    st->segment = id;
    st->bytes = bytes;
    st->recovered = false;
    state_segment_view(st, base);
    return 0;
  }
  OPENSSL_cleanse(device_key, PAGE_SEAL_KEY_LEN);
  shmdt(base);
  shmctl(id, IPC_RMID, NULL);
  return -1;
}

static void detach_chunks(struct state_segment *st)
{
  for (uint32_t i = 0; i < st->nchunks; i++)
    if (st->chunks[i])
      shmdt(st->chunks[i]);
  st->nchunks = 0;
}

/* Maps every group chunk a recovered header lists; each must still be there, and the
 * size this build's chunks are. */
static int attach_chunks(struct state_segment *st, struct state_segment_header *h, char *err,
                         size_t errlen)
{
  for (uint32_t i = 0; i < h->group_chunks; i++) {
    struct shmid_ds ds;
    int id = h->group_chunk_segment[i];
    void *chunk;
    if (shmctl(id, IPC_STAT, &ds) < 0 || ds.shm_perm.uid != geteuid() ||
        ds.shm_segsz != h->fixed.fingerprint.chunk_bytes ||
        (chunk = shmat(id, NULL, 0)) == (void *)-1) {
      snprintf(err, errlen,
               "the state %s lists group chunk %u in segment %d, which is gone "
               "or not this state's: the page map cannot be trusted without it. Remove %s "
               "to start this device empty (its pages are then lost)",
               st->path, i, id, st->path);
      detach_chunks(st);
      return -1;
    }
    st->chunks[st->nchunks++] = chunk;
  }
  return 0;
}

/* A chunk made but not yet counted when the process died is nobody's: free it. */
static void free_uncounted_chunk(struct state_segment_header *h)
{
  if (h->group_chunks >= STATE_SEGMENT_MAX_CHUNKS ||
      h->group_chunk_segment[h->group_chunks] < 0)
    return;
  struct shmid_ds ds;
  int id = h->group_chunk_segment[h->group_chunks];
  if (shmctl(id, IPC_STAT, &ds) == 0 && ds.shm_perm.uid == geteuid() &&
      ds.shm_segsz == h->fixed.fingerprint.chunk_bytes && ds.shm_nattch == 0)
    shmctl(id, IPC_RMID, NULL);
  h->group_chunk_segment[h->group_chunks] = -1;
}

/* 0 attached; 1 the segment is gone (start empty); -1 refused. */
static int attach_state(struct state_segment *st, const struct anchor *a,
                        const struct state_segment_fingerprint *fp, const uint8_t *master,
                        size_t master_len, uint8_t device_key[PAGE_SEAL_KEY_LEN], char *err,
                        size_t errlen)
{
  struct shmid_ds ds;
  if (shmctl(a->segment, IPC_STAT, &ds) < 0) {
    if (errno == EINVAL || errno == EIDRM)
      return 1;
    snprintf(err, errlen,
             "cannot open the state segment %d that %s names: %s (is the "
             "pager running as another user?)",
             a->segment, st->path, strerror(errno));
    return -1;
  }
  char start_empty[4200];
  snprintf(start_empty, sizeof start_empty,
           "remove %s to start this device empty (the "
           "pages of the device it was are then lost)",
           st->path);
  /* Ids are reused once a segment is removed: the owner, mode and identity say whether
   * this one is still the state the anchor was written for. */
  if (ds.shm_perm.uid != geteuid() || ds.shm_perm.cuid != geteuid() ||
      (ds.shm_perm.mode & 0077) != 0) {
    snprintf(err, errlen,
             "the state segment %d that %s names is not this user's own "
             "(owner uid %u, mode %o): %s",
             a->segment, st->path, (unsigned)ds.shm_perm.uid,
             (unsigned)(ds.shm_perm.mode & 0777), start_empty);
    return -1;
  }
  if (ds.shm_nattch > 0) {
    snprintf(err, errlen,
             "the state %s is in use by a running pager (pid %d attached it "
             "last): stop that one first; two pagers on one state would both hand out "
             "the same slots",
             st->path, (int)ds.shm_lpid);
    return -1;
  }
  if (ds.shm_segsz < STATE_HEADER_BYTES) {
    snprintf(err, errlen, "the segment %d that %s names is not a pager state: %s", a->segment,
             st->path, start_empty);
    return -1;
  }
  void *base = shmat(a->segment, NULL, 0);
  if (base == (void *)-1) {
    snprintf(err, errlen, "cannot map the state segment %d: %s", a->segment, strerror(errno));
    return -1;
  }
  struct state_segment_header *h = base;
  char why[1024];
  /* Nothing of the segment is used, nor written, before its header passes. */
  if (state_segment_check_header(h, ds.shm_segsz, fp, why, sizeof why) < 0) {
    snprintf(err, errlen,
             "the state segment %d that %s names is refused: %s: "
             "%s",
             a->segment, st->path, why, start_empty);
  } else if (memcmp(h->fixed.identity, a->identity, STATE_SEGMENT_IDENTITY_LEN) != 0) {
    snprintf(err, errlen,
             "the segment %d holds another device's state than %s was "
             "written for (field identity): %s",
             a->segment, st->path, start_empty);
  } else if (!wrap_device_key(h, master, master_len, device_key, false)) {
    snprintf(err, errlen,
             "the state %s was attached with another key, or its header was "
             "changed (field wrap_tag does not verify): start the pager with the same key= "
             "and enckey= files it had, or %s",
             st->path, start_empty);
  } else if (attach_chunks(st, h, err, errlen) < 0) {
    OPENSSL_cleanse(device_key, PAGE_SEAL_KEY_LEN);
  } else {
    state_segment_view(st, base);
    if (state_segment_check_records(h, st->map, st->seals, (struct group *const *)st->chunks,
                                    st->nchunks, why, sizeof why) == 0) {
      free_uncounted_chunk(h);
      h->generation++;
      st->generation = h->generation;
      st->segment = a->segment;
      st->bytes = h->fixed.regions.total;
      st->recovered = true;
      return 0;
    }
    snprintf(err, errlen,
             "the state segment %d that %s names is refused: %s: "
             "%s",
             a->segment, st->path, why, start_empty);
    OPENSSL_cleanse(device_key, PAGE_SEAL_KEY_LEN);
    detach_chunks(st);
    state_segment_view_clear(st);
  }
  shmdt(base);
  return -1;
}

/* ---- the pager's lock ------------------------------------------------------------------
 * PATH.lock, held (flock) by the one pager serving the state for as long as it lives: the
 * kernel lets it go when the process ends, however it ends. A second pager is refused
 * at once, and a standby sleeps on it (state_segment_wait_for_pager_end), so that of
 * several standbys exactly one wakes to take over; the others wait on for that one. */

static int adopted_lock_fd = -1; /* a lock this process's standby already holds */
static char adopted_lock_path[4200];

static void lock_path_of(const char *path, char *out, size_t outlen)
{
  snprintf(out, outlen, "%s.lock", path);
}

static int state_lock_take(const char *path, char *err, size_t errlen)
{
  char lock[4200];
  lock_path_of(path, lock, sizeof lock);
  if (adopted_lock_fd >= 0 && strcmp(adopted_lock_path, lock) == 0) {
    int fd = adopted_lock_fd;
    adopted_lock_fd = -1;
    return fd;
  }
  int fd = rp_file_open_kept(lock, 0600);
  if (fd < 0) {
    snprintf(err, errlen,
             "cannot open the state's lock %s: %s (state= must name a file "
             "in a directory this user can write, such as /run/rampart/NAME/state)",
             lock, rp_file_why(errno));
    return -1;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
    int e = errno;
    close(fd);
    if (e == EWOULDBLOCK)
      snprintf(err, errlen,
               "the state %s is in use by a running pager (it holds %s): stop "
               "that one first; two pagers on one state would both hand out the same "
               "slots",
               path, lock);
    else
      snprintf(err, errlen, "cannot lock %s: %s", lock, strerror(e));
    return -1;
  }
  return fd;
}

int state_segment_wait_for_pager_end(const char *path, char *err, size_t errlen)
{
  char lock[4200];
  lock_path_of(path, lock, sizeof lock);
  int fd = open(lock, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    snprintf(err, errlen, "cannot open %s: %s (is a pager serving state=%s?)", lock,
             rp_file_why(errno), path);
    return -1;
  }
  if (flock(fd, LOCK_EX) < 0) {
    int e = errno;
    close(fd);
    if (e == EINTR)
      return 1;
    snprintf(err, errlen, "cannot wait on %s: %s", lock, strerror(e));
    return -1;
  }
  if (adopted_lock_fd >= 0)
    close(adopted_lock_fd);
  adopted_lock_fd = fd;
  snprintf(adopted_lock_path, sizeof adopted_lock_path, "%s", lock);
  /* The lock goes when the process's files close; its mappings (the segment) may outlive
   * that by a moment when another task holds its memory (a reader of /proc/PID/mem). */
  struct anchor a;
  char ignored[256];
  struct shmid_ds ds;
  if (anchor_read(path, &a, ignored, sizeof ignored) == 1)
    for (unsigned waited = 0;
         waited < 5000 && shmctl(a.segment, IPC_STAT, &ds) == 0 && ds.shm_nattch > 0;
         waited += 10)
      usleep(10000);
  return 0;
}

static int open_state(struct state_segment *st, const char *path,
                      const struct state_segment_fingerprint *given, const uint8_t *master,
                      size_t master_len, uint8_t device_key[PAGE_SEAL_KEY_LEN], char *note,
                      size_t notelen, char *err, size_t errlen)
{
  struct state_segment_fingerprint layout = *given;
  layout.chunk_bytes = GROUP_CHUNK_SIZE * sizeof(struct group);
  const struct state_segment_fingerprint *fp = &layout;
  memset(st, 0, sizeof *st);
  st->segment = -1;
  st->lock_fd = -1;
  if (note && notelen)
    note[0] = '\0';
  st->chunks = calloc(STATE_SEGMENT_MAX_CHUNKS, sizeof *st->chunks);
  if (!st->chunks) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  if (strlen(path) >= sizeof st->path) {
    snprintf(err, errlen, "state= path is too long (at most %zu characters)",
             sizeof st->path - 1);
    return -1;
  }
  snprintf(st->path, sizeof st->path, "%s", path);
  if (check_segments_outlive_processes(err, errlen) < 0)
    return -1;
  st->lock_fd = state_lock_take(path, err, errlen);
  if (st->lock_fd < 0)
    return -1;
  struct anchor a;
  int found = anchor_read(path, &a, err, errlen);
  if (found < 0)
    return -1;
  if (found == 1) {
    int r = attach_state(st, &a, fp, master, master_len, device_key, err, errlen);
    if (r <= 0)
      return r;
    if (note && notelen)
      snprintf(note, notelen,
               "the state segment %d that %s named is gone (the host "
               "restarted, or it was removed): starting empty",
               a.segment, path);
  }
  return create_state(st, fp, master, master_len, device_key, err, errlen);
}

int state_segment_open(struct state_segment *st, const char *path,
                       const struct state_segment_fingerprint *fp, const uint8_t *master,
                       size_t master_len, uint8_t device_key[PAGE_SEAL_KEY_LEN], char *note,
                       size_t notelen, char *err, size_t errlen)
{
  int r = open_state(st, path, fp, master, master_len, device_key, note, notelen, err,
                     errlen);
  if (r < 0) {
    free(st->chunks);
    st->chunks = NULL;
    if (st->lock_fd >= 0)
      close(st->lock_fd);
    st->lock_fd = -1;
  }
  return r;
}

void *state_segment_chunk_new(struct state_segment *st, uint32_t index)
{
  struct state_segment_header *h = st->header;
  if (index != st->nchunks || index >= STATE_SEGMENT_MAX_CHUNKS) {
    errno = ENOSPC;
    return NULL;
  }
  void *chunk = NULL;
  int id = locked_segment_new(h->fixed.fingerprint.chunk_bytes, &chunk);
  if (id < 0)
    return NULL;
  /* Listed before it is counted: a crash between the two leaves a segment nobody
   * names, never a count naming a segment that is not there. */
  h->group_chunk_segment[index] = id;
  h->group_chunks = index + 1;
  st->chunks[st->nchunks++] = chunk;
  return chunk;
}

static struct group *state_chunk_alloc(void *ctx, uint32_t index)
{
  return state_segment_chunk_new(ctx, index);
}

/* Chunks stay in their segments when the table is destroyed: detaching unmaps them. */
static void state_chunk_release(void *ctx, struct group *chunk)
{
  (void)ctx;
  (void)chunk;
}

struct group_chunk_source state_segment_group_chunks(struct state_segment *st)
{
  return (struct group_chunk_source){ state_chunk_alloc, state_chunk_release, st };
}

void state_segment_detach(struct state_segment *st)
{
  detach_chunks(st);
  free(st->chunks);
  st->chunks = NULL;
  if (st->base)
    shmdt(st->base);
  if (st->lock_fd >= 0)
    close(st->lock_fd); /* after the detach: a standby woken by it finds the segment free */
  st->lock_fd = -1;
  state_segment_view_clear(st);
}

int state_segment_serving_pid(const char *path, pid_t *pid, char *err, size_t errlen)
{
  struct anchor a;
  int found = anchor_read(path, &a, err, errlen);
  if (found < 0)
    return -1;
  struct shmid_ds ds;
  if (found == 0 || shmctl(a.segment, IPC_STAT, &ds) < 0) {
    snprintf(err, errlen,
             "there is no pager state at %s: start the serving pager with "
             "state=%s first, then its standby",
             path, path);
    return -1;
  }
  if (ds.shm_nattch == 0) {
    snprintf(err, errlen,
             "no pager serves the state %s (its pager ended without closing): "
             "start a pager with state=%s, which takes it over, not a standby",
             path, path);
    return -1;
  }
  /* The serving pager is the last process that attached the segment: only a pager does,
   * once, at open, and a second one is refused before it attaches. */
  *pid = ds.shm_lpid;
  return 0;
}

void state_segment_remove(struct state_segment *st)
{
  int id = st->segment;
  if (st->header)
    for (uint32_t i = 0; i < st->header->group_chunks && i < STATE_SEGMENT_MAX_CHUNKS; i++)
      shmctl(st->header->group_chunk_segment[i], IPC_RMID, NULL);
  state_segment_detach(st);
  if (id >= 0)
    shmctl(id, IPC_RMID, NULL);
  st->segment = -1;
  unlink(st->path);
  /* A standby asleep on the lock wakes to find no anchor: nothing to take over. */
  char lock[4200];
  lock_path_of(st->path, lock, sizeof lock);
  unlink(lock);
}
